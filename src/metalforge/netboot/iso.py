"""Boot ISOs of the agent's ramdisk, for BMCs that boot a node from virtual media.

An ISO holds the deploy kernel and ramdisk and boots them with the kernel
parameters baked in, from BIOS (isolinux, El Torito) and from x86-64 UEFI
(a GRUB with its configuration built in, in an EFI system partition image),
and as a disk image (isohybrid) for BMCs that attach it as a USB stick. It is built with
Debian's tools (``xorriso``, ``isolinux``, ``grub-efi-amd64-bin``,
``mtools``, ``dosfstools``), never by hand.

The same kernel, ramdisk and parameters always give the same bytes
(``SOURCE_DATE_EPOCH``, fixed volume ids and file times), so an ISO is
stored by the digest of its inputs and built once per node boot that
differs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

VOLUME_ID = "METALFORGE_AGENT"
CONFIG_DRIVE_VOLUME_ID = "config-2"
"""The volume id of an ISO that carries ``openstack/`` metadata (a node's
``network_data``), by which a ramdisk finds it, as it finds a config drive."""
NETWORK_DATA_PATH = "openstack/latest/network_data.json"
STAMP_FILE = "metalforge-agent"
"""A file at the ISO's root by which GRUB finds the ISO among the machine's disks."""
EPOCH = "1700000000"
"""Every timestamp in the ISO, so that equal inputs give equal bytes."""


_GRUB_MODULES = (
    "part_gpt", "part_msdos", "fat", "iso9660", "search", "search_fs_file",
    "linux", "normal", "configfile", "echo", "test", "boot", "gzio",
)  # fmt: skip
"""What the UEFI boot loader needs to find the ISO and boot a Linux kernel from it."""


class IsoError(Exception):
    """The ISO could not be built (a tool missing or failing); the message says which."""


@dataclass(frozen=True)
class IsoTools:
    """Where the building blocks are (Debian's paths by default)."""

    isolinux_bin: Path = Path("/usr/lib/ISOLINUX/isolinux.bin")
    isohybrid_mbr: Path = Path("/usr/lib/ISOLINUX/isohdpfx.bin")
    ldlinux: Path = Path("/usr/lib/syslinux/modules/bios/ldlinux.c32")
    grub_efi_modules: Path = Path("/usr/lib/grub/x86_64-efi")

    def missing(self) -> list[str]:
        """What is not installed, as the Debian package to install."""
        wanted = {
            "xorriso": shutil.which("xorriso") is not None,
            "isolinux": self.isolinux_bin.exists() and self.isohybrid_mbr.exists(),
            "syslinux-common": self.ldlinux.exists(),
            "grub-efi-amd64-bin": self.grub_efi_modules.is_dir(),
            "grub-common": shutil.which("grub-mkimage") is not None,
            "mtools": shutil.which("mcopy") is not None,
            "dosfstools": shutil.which("mkfs.vfat") is not None,
        }
        return [package for package, present in wanted.items() if not present]


def iso_key(
    kernel_sha256: str,
    ramdisk_sha256: str,
    params: tuple[str, ...],
    network_data: bytes | None = None,
) -> str:
    """The ISO's name in the cache: a digest of what goes into it."""
    text = "\n".join((kernel_sha256, ramdisk_sha256, *params))
    if network_data is not None:
        text += "\nnetwork_data " + hashlib.sha256(network_data).hexdigest()
    return hashlib.sha256(text.encode()).hexdigest()


def build_iso(
    kernel: Path,
    ramdisk: Path,
    params: tuple[str, ...],
    out: Path,
    tools: IsoTools | None = None,
    network_data: bytes | None = None,
) -> None:
    """Write a bootable ISO of ``kernel`` and ``ramdisk`` booted with ``params`` to ``out``.

    With ``network_data`` (a node's, as JSON) the ISO also holds it at
    ``NETWORK_DATA_PATH`` and is labelled ``config-2``, for a ramdisk on a
    network without DHCP.

    ``params`` must be safe to write into a boot loader's configuration as
    they are (the settings and ``agent_params`` check them). Raises
    ``IsoError``; ``out`` appears only complete (renamed into place).
    """
    tools = tools or IsoTools()
    missing = tools.missing()
    if missing:
        raise IsoError(f"cannot build a boot ISO: install {', '.join(missing)}")
    cmdline = " ".join(params)
    with tempfile.TemporaryDirectory(prefix="metalforge-iso-") as raw:
        work = Path(raw)
        tree = work / "tree"
        (tree / "isolinux").mkdir(parents=True)
        shutil.copyfile(kernel, tree / "vmlinuz")
        shutil.copyfile(ramdisk, tree / "initrd")
        (tree / STAMP_FILE).write_text("metalforge agent boot ISO\n", encoding="ascii")
        if network_data is not None:
            (tree / NETWORK_DATA_PATH).parent.mkdir(parents=True)
            (tree / NETWORK_DATA_PATH).write_bytes(network_data)
        shutil.copyfile(tools.isolinux_bin, tree / "isolinux" / "isolinux.bin")
        shutil.copyfile(tools.ldlinux, tree / "isolinux" / "ldlinux.c32")
        (tree / "isolinux" / "isolinux.cfg").write_text(
            "DEFAULT agent\nPROMPT 0\nTIMEOUT 0\n"
            f"LABEL agent\n  KERNEL /vmlinuz\n  APPEND initrd=/initrd {cmdline}\n",
            encoding="ascii",
        )
        _efi_image(work, tree / "efiboot.img", cmdline, tools)
        for path in (tree, *tree.rglob("*")):
            os.utime(path, (int(EPOCH), int(EPOCH)))
        _run(
            [
                "xorriso", "-as", "mkisofs", "-quiet",
                "-o", str(work / "out.iso"),
                "-V", VOLUME_ID if network_data is None else CONFIG_DRIVE_VOLUME_ID,
                "-R", "-J",
                "-isohybrid-mbr", str(tools.isohybrid_mbr),
                "-c", "isolinux/boot.cat",
                "-b", "isolinux/isolinux.bin",
                "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table",
                "-eltorito-alt-boot",
                "-e", "efiboot.img", "-no-emul-boot", "-isohybrid-gpt-basdat",
                str(tree),
            ],
            work,
        )  # fmt: skip
        out.parent.mkdir(parents=True, exist_ok=True)
        temporary = out.with_name(f".{out.name}.tmp")
        shutil.move(work / "out.iso", temporary)
        temporary.replace(out)


def _efi_image(work: Path, image: Path, cmdline: str, tools: IsoTools) -> None:
    """A FAT image holding a GRUB, its configuration built in, that boots the ISO's kernel
    and ramdisk."""
    grub_cfg = work / "grub.cfg"
    grub_cfg.write_text(
        f"search --no-floppy --set=root --file /{STAMP_FILE}\n"
        "set timeout=0\n"
        f"linux /vmlinuz {cmdline}\n"
        "initrd /initrd\n"
        "boot\n",
        encoding="ascii",
    )
    efi = work / "BOOTX64.EFI"
    # grub-mkimage, not grub-mkstandalone: the latter packs its files in a tar stamped
    # with the time of the build, so equal inputs would not give equal bytes.
    _run(
        [
            "grub-mkimage", "-O", "x86_64-efi",
            "-d", str(tools.grub_efi_modules),
            "-p", "/boot/grub",
            "-c", str(grub_cfg),
            "-o", str(efi),
            *_GRUB_MODULES,
        ],
        work,
    )  # fmt: skip
    os.utime(efi, (int(EPOCH), int(EPOCH)))
    size_kib = (efi.stat().st_size // 1024) + 512
    _run(["mkfs.vfat", "--invariant", "-C", "-n", "EFIBOOT", str(image), str(size_kib)], work)
    _run(["mmd", "-i", str(image), "::/EFI", "::/EFI/BOOT"], work)
    _run(["mcopy", "-m", "-i", str(image), str(efi), "::/EFI/BOOT/BOOTX64.EFI"], work)


def _run(command: list[str], work: Path) -> None:
    env = {
        **os.environ,
        "SOURCE_DATE_EPOCH": EPOCH,
        "MTOOLS_SKIP_CHECK": "1",
        "TZ": "UTC",
    }
    try:
        subprocess.run(command, cwd=work, env=env, capture_output=True, check=True, timeout=300)
    except subprocess.CalledProcessError as exc:
        said = exc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise IsoError(f"{command[0]} failed building the boot ISO: {' '.join(said)}") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IsoError(f"{command[0]} could not run: {exc}") from None
