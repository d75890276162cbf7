"""A small whole-disk image that boots from a disk by BIOS: the lab's instance image.

What the lab deploys to a QEMU machine to show that a deploy worked end to
end: the agent wrote the image to the machine's disk, and the machine then
booted it. An MBR disk (syslinux's boot code) with one FAT partition that
holds syslinux, the tiny ramdisk's kernel and an initramfs of busybox whose
``/init`` prints ``MARK`` and the kernel command line on the serial console
and powers the machine off. 24 MiB, built from Debian's ``syslinux``,
``syslinux-common``, ``mtools``, ``dosfstools`` and ``parted`` without root or loop
devices.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

from metalforge_lab import tiny_ramdisk

MARK = "METALFORGE-INSTANCE booted from its disk"
"""The line the instance prints once its own kernel runs its init."""

SIZE_MIB = 24
PARTITION_START = 2048
"""The partition's first sector (1 MiB in), as partitioning tools place it."""

SYSLINUX_MBR = Path("/usr/lib/syslinux/mbr/mbr.bin")

_INIT = f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
dmesg -n 1  # no kernel message in the middle of the line the test reads
echo "{MARK}: $(cat /proc/cmdline)"
poweroff -f
"""

_SYSLINUX_CFG = """DEFAULT instance
LABEL instance
  KERNEL vmlinuz
  INITRD initrd.gz
  APPEND console=ttyS0 panic=-1 metalforge-instance
"""


def missing_tools() -> list[str]:
    """The Debian packages this machine lacks for the build."""
    programs = {"syslinux": "syslinux", "mcopy": "mtools", "mkfs.fat": "dosfstools"}
    programs["parted"] = "parted"
    missing = [package for program, package in programs.items() if shutil.which(program) is None]
    if not SYSLINUX_MBR.exists():
        missing.append("syslinux-common")
    return missing


def build(workdir: Path) -> Path:
    """``workdir/instance.raw`` (built once; later calls reuse it)."""
    image = workdir / "instance.raw"
    if image.exists():
        return image
    workdir.mkdir(parents=True, exist_ok=True)
    ramdisk = tiny_ramdisk.build(workdir / "tiny")
    partial = workdir / f"instance.raw.{os.getpid()}.tmp"
    partial.unlink(missing_ok=True)
    with partial.open("wb") as handle:
        handle.truncate(SIZE_MIB << 20)
    _run(["parted", "--script", str(partial), "mklabel", "msdos", "mkpart", "primary",
          "fat16", f"{PARTITION_START}s", "100%", "set", "1", "boot", "on"])  # fmt: skip
    sectors = (SIZE_MIB << 20) // 512 - PARTITION_START
    offset = PARTITION_START * 512
    _run(["mkfs.fat", "-F", "16", "-n", "INSTANCE", "--offset", str(PARTITION_START),
          str(partial), str(sectors // 2)])  # fmt: skip
    files = {
        "vmlinuz": ramdisk.kernel.read_bytes(),
        "initrd.gz": _initramfs(ramdisk.busybox),
        "syslinux.cfg": _SYSLINUX_CFG.encode(),
    }
    staging = workdir / f"instance-files.{os.getpid()}"
    staging.mkdir(exist_ok=True)
    for name, content in files.items():
        (staging / name).write_bytes(content)
        _run(["mcopy", "-o", "-i", f"{partial}@@{offset}", str(staging / name), f"::{name}"])
    _run(["syslinux", "--offset", str(offset), "--install", str(partial)])
    with partial.open("r+b") as handle:
        handle.write(SYSLINUX_MBR.read_bytes()[:440])  # boot code only: the table stays
    shutil.rmtree(staging)
    partial.replace(image)
    return image


def _initramfs(busybox: Path) -> bytes:
    files = {
        "bin": (0o040755, b""),
        "dev": (0o040755, b""),
        "proc": (0o040755, b""),
        "bin/busybox": (0o100755, busybox.read_bytes()),
        "init": (0o100755, _INIT.encode()),
    }
    return gzip.compress(tiny_ramdisk.newc_archive(files), mtime=0)


def _run(command: list[str]) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=120)
