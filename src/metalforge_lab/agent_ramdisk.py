"""The agent's ramdisk: a kernel and an initramfs that boot ironic-python-agent on a server.

What ``make ramdisk`` builds, from Debian 12 packages (``mmdebstrap``
through apt) and ironic-python-agent from PyPI at pinned versions, with the
tools the agent's steps run: disks and partitions, software RAID, secure
erase, firmware and BMC queries. The whole root file system is the
initramfs: the kernel unpacks it into memory and runs ``/init``, a shell
script (there is no service manager to wait for) that starts udev,
configures the network (the node's ``network_data.json`` from a virtual-media
ISO labelled ``config-2`` when there is one, ``metalforge_lab.ramdisk_network``;
otherwise DHCP on every interface) and runs the agent, again if it stops.
The agent reads what metalforge put on the kernel command line
(``ipa-api-url``, ``BOOTIF``, the inspection callback). ``poweroff`` and
``reboot`` sync and ask the kernel directly, as the agent's power commands
expect of a ramdisk.

Two kernels: ``generic`` (Debian's full kernel, its drivers for real
servers) and ``cloud`` (Debian's kernel for virtual machines: smaller and
quicker to boot under emulation, what the tests use). Debian's non-free
firmware is not included: a NIC that needs it needs a mirror with the
``non-free-firmware`` component and the package added to ``PACKAGES``.

The build is reproducible for the same Debian archive state: package and
PyPI versions are pinned (the kernel by version, Python packages by
``AGENT_PINS``), every file carries ``EPOCH`` as its time, bytecode is
checked by hash and the archive is written in name order. It runs as root
(``mmdebstrap`` installs into a directory and runs the packages' scripts
in a chroot).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from metalforge_lab import ramdisk_network

KERNEL_VERSION = "6.1.0-56"
"""Debian 12's kernel ABI the ramdisk carries (both flavours), pinned so that two builds match."""

KERNELS = {
    "generic": f"linux-image-{KERNEL_VERSION}-amd64",
    "cloud": f"linux-image-{KERNEL_VERSION}-cloud-amd64",
}

SUITE = "bookworm"

PACKAGES = (
    # Satisfies init-system-helpers' merged-/usr dependency, which would otherwise pull in
    # usrmerge and with it Perl (35 MiB of the archive unpacked).
    "usr-is-merged",
    "python3",  # the agent's interpreter (3.11, as the pinned wheels are built for)
    "ca-certificates",  # image downloads over HTTPS
    "udev",  # device nodes, /dev/disk/by-*, and the agent's `udevadm settle`
    "kmod",  # modprobe (the agent loads ipmi_si, dm_multipath, raid modules)
    "iproute2",
    "isc-dhcp-client",  # the init's DHCP on every interface
    "util-linux",  # lsblk, blkid, wipefs, blockdev, sfdisk
    "util-linux-extra",  # hwclock: the clock is synced before the agent powers off
    "psmisc",  # fuser: whether a disk is in use before its metadata is erased
    "bsdextrautils",  # hexdump
    "file",  # what an image is
    "parted",
    "gdisk",  # sgdisk: GPT repairs after writing a whole-disk image
    "e2fsprogs",
    "dosfstools",
    "qemu-utils",  # qemu-img: images in formats other than raw
    "mdadm",  # software RAID configuration and cleaning
    "hdparm",  # ATA secure erase
    "nvme-cli",  # NVMe format / secure erase
    "sg3-utils",
    "lsscsi",
    "smartmontools",
    "lshw",  # the inventory's memory and system vendor
    "dmidecode",
    "pciutils",
    "ethtool",
    "ipmitool",  # the BMC's address for the inventory
    "efibootmgr",  # UEFI boot entries after a deploy
    "cryptsetup-bin",
    "procps",
    # The rescue system: the tenant logs in as `rescue` over SSH or on the console.
    "dropbear-bin",
    "sudo",
    "login",
    "passwd",
)

AGENT_PINS = (
    "ironic-python-agent==13.0.0",
    "certifi==2026.10.19.post1",
    "cffi==2.1.1",
    "charset-normalizer==3.5.3",
    "cheroot==11.1.2",
    "cryptography==50.0.2",
    "debtcollector==3.1.0",
    "fasteners==0.20",
    "flexcache==0.3",
    "flexparser==0.4",
    "futurist==3.5.0",
    "idna==3.20",
    "ifaddr==0.2.0",
    "iso8601==2.1.0",
    "jaraco.functools==4.6.0",
    "MarkupSafe==3.0.4",
    "more-itertools==11.2.1",
    "msgpack==1.2.4",
    "netaddr==1.3.0",
    "oslo.concurrency==7.6.1",
    "oslo.config==10.7.0",
    "oslo.context==6.5.0",
    "oslo.i18n==6.9.0",
    "oslo.log==8.3.2",
    "oslo.serialization==5.11.0",
    "oslo.utils==10.2.0",
    "packaging==26.4",
    "pbr==7.1.3",
    "Pint==0.25.3",
    "platformdirs==4.14.8",
    "psutil==7.2.2",
    "pycparser==3.12",
    "pyparsing==3.3.3",
    "python-dateutil==4.0.0",
    "pyudev==0.24.5",
    "PyYAML==6.0.4",
    "requests==2.34.2",
    "rfc3986==2.0.0",
    "stevedore==5.10.0",
    "tenacity==9.2.1",
    "tooz==9.1.0",
    "typing_extensions==4.16.0",
    "tzdata==2026.6",
    "urllib3==2.8.0",
    "voluptuous==0.16.0",
    "Werkzeug==3.1.9",
    "wrapt==2.5.2",
    "zeroconf==0.154.0",
)
"""ironic-python-agent and everything it imports, at the versions the lab's agent runs."""

EPOCH = 1735689600
"""2025-01-01: the time of every file in the archive and ``SOURCE_DATE_EPOCH`` of the build."""

UNUSED_MODULES = (
    "kernel/sound",
    "kernel/drivers/gpu",
    "kernel/drivers/media",
    "kernel/drivers/net/wireless",
    "kernel/drivers/bluetooth",
    "kernel/drivers/staging",
    "kernel/drivers/iio",
    "kernel/drivers/input/joystick",
    "kernel/drivers/input/touchscreen",
    "kernel/drivers/hid",
    "kernel/net/bluetooth",
    "kernel/net/wireless",
    "kernel/net/mac80211",
)
"""Kernel modules a server's ramdisk never loads (sound, graphics, cameras, radios):
a third of the generic kernel's modules."""

NETWORK_SCRIPT = "/usr/local/lib/metalforge/network_data.py"
"""Where ``metalforge_lab.ramdisk_network`` is in the ramdisk."""

MARK = "METALFORGE-AGENT-RAMDISK"
"""Prefix of the init's own lines on the console: where boot got to."""

RESCUE_PASSWORD_FILE = "/etc/ipa-rescue-config/ipa-rescue-password"
"""Where the agent writes the rescue password's hash (``rescue.finalize_rescue``)."""

_RESCUE = f"""# The rescue system: a `rescue` user with the password's hash the agent wrote, root
# through sudo, SSH (dropbear) and a login on the console.
hash="$(cat {RESCUE_PASSWORD_FILE} 2>/dev/null)"
if [ -z "$hash" ]; then
  echo "{MARK} rescue: no password hash in {RESCUE_PASSWORD_FILE}; nobody can log in"
else
  grep -q '^rescue:' /etc/group || echo 'rescue:x:1000:' >> /etc/group
  account='rescue:x:1000:1000:rescue:/home/rescue:/bin/bash'
  grep -q '^rescue:' /etc/passwd || echo "$account" >> /etc/passwd
  grep -v '^rescue:' /etc/shadow > /run/shadow
  echo "rescue:$hash:20000:0:99999:7:::" >> /run/shadow
  cat /run/shadow > /etc/shadow && rm -f /run/shadow
  mkdir -p /home/rescue && chown 1000:1000 /home/rescue
  echo 'rescue ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/rescue
  chmod 0440 /etc/sudoers.d/rescue
  mkdir -p /etc/dropbear
  dropbear -R -p 22
  echo "{MARK} rescue ready: log in as rescue (SSH on port 22, or the console)"
fi
console=ttyS0
[ -e /sys/class/tty/$console ] || console=tty1
while true; do
  setsid agetty --noclear -L 115200 $console vt100
  sleep 1
done
"""

_INIT = f"""#!/bin/sh
# metalforge's agent ramdisk: devices, network, then ironic-python-agent.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /run /tmp /var/log /var/lib/dhcp
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
echo "{MARK} init"
/lib/systemd/systemd-udevd --daemon
udevadm trigger --type=subsystems --action=add
udevadm trigger --type=devices --action=add
udevadm settle --timeout=120
ip link set lo up
interfaces=""
for device in /sys/class/net/*; do
  name="${{device##*/}}"
  [ "$name" = lo ] || [ ! -e "$device/device" ] && continue
  ip link set "$name" up
  interfaces="$interfaces $name"
done
# Virtual media for a network without DHCP carries the node's network_data.json on a
# volume labelled config-2 (metalforge_lab.ramdisk_network applies it).
configured=""
drive="$(blkid -L config-2 2>/dev/null)"
if [ -n "$drive" ] && mkdir -p /run/config-2 && mount -o ro "$drive" /run/config-2; then
  data=/run/config-2/openstack/latest/network_data.json
  if [ -f "$data" ] && python3 {NETWORK_SCRIPT} "$data"; then configured=yes; fi
  umount /run/config-2
fi
# Otherwise one dhclient for every interface: it goes to the background with the first lease.
while [ -z "$configured" ]; do
  dhclient -1 -pf /run/dhclient.pid $interfaces && configured=yes && break
  echo "{MARK} no DHCP answer on$interfaces; asking again"
done
echo "{MARK} network $(ip -4 -o addr show scope global | awk '{{print $2, $4}}' | tr '\\n' ' ')"
mkdir -p /etc/ipa-rescue-config  # where the agent writes a rescue password's hash
while true; do
  echo "{MARK} agent starting"
  python3 -c 'from ironic_python_agent.cmd.agent import run; run()'
  status=$?
  # The agent leaves /etc/.rescued when it finalised a rescue, and exits: this ramdisk
  # is the node's rescue system from now on, and the agent is not started again.
  [ -e /etc/.rescued ] && break
  echo "{MARK} agent exited with status $status; starting it again in 5 s"
  sleep 5
done
{_RESCUE}
"""

_POWER = """#!/bin/sh
# No service manager runs in this ramdisk: write the disks out and ask the kernel.
sync
echo {key} > /proc/sysrq-trigger
"""


class RamdiskError(Exception):
    """The ramdisk could not be built; the message says which step and why."""


@dataclass(frozen=True)
class AgentRamdisk:
    kernel: Path
    initramfs: Path
    manifest: Path


def recipe(kernel: str) -> str:
    """A digest of what decides the build's output (the kernel and this module, which holds
    the packages, the pins and the scripts, and the network script it installs): a changed
    recipe rebuilds."""
    digest = hashlib.sha256(KERNELS[kernel].encode())
    digest.update(Path(__file__).read_bytes())
    digest.update(Path(ramdisk_network.__file__).read_bytes())
    return digest.hexdigest()


def missing_tools() -> list[str]:
    """The programs the build runs that this machine lacks (Debian package names)."""
    wanted = {"mmdebstrap": "mmdebstrap", "cpio": "cpio", "zstd": "zstd"}
    return [package for program, package in wanted.items() if shutil.which(program) is None]


def build(
    out_dir: Path, *, kernel: str = "generic", mirror: str | None = None,
    log: Callable[[str], None] = lambda _line: None,
) -> AgentRamdisk:  # fmt: skip
    """``agent.kernel``, ``agent.initramfs`` and ``agent-ramdisk.json`` in ``out_dir``.

    A ramdisk already there from the same recipe is reused.
    """
    if kernel not in KERNELS:
        raise RamdiskError(f"kernel must be one of {sorted(KERNELS)}, not {kernel!r}")
    made = AgentRamdisk(
        out_dir / "agent.kernel", out_dir / "agent.initramfs", out_dir / "agent-ramdisk.json"
    )
    if _built(made, recipe(kernel)):
        return made
    if os.geteuid() != 0:
        raise RamdiskError("building the ramdisk needs root (mmdebstrap installs into a chroot)")
    if missing := missing_tools():
        raise RamdiskError(f"install the Debian packages {', '.join(missing)} first")
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as scratch:
        root = Path(scratch) / "root"
        log(f"installing Debian {SUITE} packages into {root}")
        _debootstrap(root, kernel, mirror)
        log("installing ironic-python-agent and its Python packages")
        _install_agent(root)
        _configure(root)
        _prune_modules(root)
        packages = _package_list(root)
        vmlinuz = next((root / "boot").glob("vmlinuz-*"))
        shutil.copyfile(vmlinuz, Path(scratch) / "agent.kernel")
        shutil.rmtree(root / "boot")
        log("writing the initramfs")
        _archive(root, Path(scratch) / "agent.initramfs")
        seconds = round(time.monotonic() - started)
        manifest = {
            "recipe": recipe(kernel),
            "kernel": KERNELS[kernel],
            "suite": SUITE,
            "packages": packages,
            "agent": list(AGENT_PINS),
            "build_seconds": seconds,
            "kernel_sha256": _sha256(Path(scratch) / "agent.kernel"),
            "initramfs_sha256": _sha256(Path(scratch) / "agent.initramfs"),
            "initramfs_bytes": (Path(scratch) / "agent.initramfs").stat().st_size,
        }
        (Path(scratch) / "agent.kernel").replace(made.kernel)
        (Path(scratch) / "agent.initramfs").replace(made.initramfs)
        made.manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"built in {seconds} s: {made.kernel}, {made.initramfs}")
    return made


def _built(made: AgentRamdisk, wanted: str) -> bool:
    if not (made.kernel.exists() and made.initramfs.exists() and made.manifest.exists()):
        return False
    try:
        recorded = json.loads(made.manifest.read_text()).get("recipe")
    except (OSError, ValueError):
        return False
    return bool(recorded == wanted)


def _run(step: str, command: list[str], *, timeout: float) -> subprocess.CompletedProcess[bytes]:
    environment = {**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH), "LC_ALL": "C.UTF-8"}
    try:
        return subprocess.run(
            command, check=True, capture_output=True, env=environment, timeout=timeout
        )
    except FileNotFoundError:
        raise RamdiskError(f"{step}: {command[0]} is not installed") from None
    except subprocess.CalledProcessError as error:
        detail = (error.stderr or b"").decode(errors="replace")[-2000:]
        raise RamdiskError(f"{step} failed (status {error.returncode}): {detail}") from None
    except subprocess.TimeoutExpired:
        raise RamdiskError(f"{step} did not finish in time") from None


def _debootstrap(root: Path, kernel: str, mirror: str | None) -> None:
    excluded = ("doc", "man", "info", "locale", "lintian", "linda")
    command = [
        "mmdebstrap", "--mode=root", "--variant=minbase",
        f"--include={','.join((KERNELS[kernel], *PACKAGES))}",
        *(f"--dpkgopt=path-exclude=/usr/share/{name}/*" for name in excluded),
        SUITE, str(root),
    ]  # fmt: skip
    if mirror:
        command.append(mirror)
    _run("mmdebstrap", command, timeout=1800)


def _install_agent(root: Path) -> None:
    """The pinned wheels for the ramdisk's Python 3.11, from whichever index pip uses here;
    binary wheels only, so nothing compiles against this machine's libraries."""
    target = root / "usr/local/lib/python3.11/dist-packages"
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as pins:
        pins.write("\n".join(AGENT_PINS) + "\n")
        pins.flush()
        _run(
            "pip install ironic-python-agent",
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
                "--disable-pip-version-check", "--target", str(target),
                "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
                "--platform", "manylinux2014_x86_64", "--only-binary=:all:",
                "--no-deps", "-r", pins.name,
            ],
            timeout=1800,
        )  # fmt: skip
    # The ramdisk's own interpreter compiles the bytecode, checked by hash, not by time.
    _run(
        "compiling the agent's bytecode",
        ["chroot", str(root), "python3", "-m", "compileall", "-q", "-j", "0",
         "--invalidation-mode", "unchecked-hash", "/usr/local/lib/python3.11/dist-packages",
         "/usr/lib/python3.11"],
        timeout=900,
    )  # fmt: skip


def _configure(root: Path) -> None:
    (root / "init").write_text(_INIT)
    (root / "init").chmod(0o755)
    sbin = root / "usr/local/sbin"
    sbin.mkdir(parents=True, exist_ok=True)
    for name, key in (("poweroff", "o"), ("reboot", "b")):
        (sbin / name).write_text(_POWER.format(key=key))
        (sbin / name).chmod(0o755)
    (root / "etc/hostname").write_text("metalforge-agent\n")
    # nvme-cli's install made up this host's NVMe identity; every machine that boots the
    # ramdisk would share it. Without the files nvme-cli derives one per machine.
    for identity in ("etc/nvme/hostid", "etc/nvme/hostnqn"):
        (root / identity).unlink(missing_ok=True)
    script = root / NETWORK_SCRIPT.lstrip("/")
    script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ramdisk_network.__file__, script)
    for leftover in ("var/cache/apt", "var/lib/apt/lists", "var/log"):
        for entry in (root / leftover).glob("*"):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def _prune_modules(root: Path) -> None:
    [modules] = sorted((root / "lib/modules").iterdir())
    for unused in UNUSED_MODULES:
        shutil.rmtree(modules / unused, ignore_errors=True)
    _run("depmod", ["chroot", str(root), "depmod", modules.name], timeout=300)


def _package_list(root: Path) -> list[str]:
    listed = _run(
        "listing the packages",
        ["chroot", str(root), "dpkg-query", "-W", "-f", "${Package}=${Version}\\n"],
        timeout=120,
    )
    return sorted(listed.stdout.decode().split())


def _archive(root: Path, out: Path) -> None:
    """A newc cpio archive of ``root`` in name order, every time ``EPOCH``, zstd-compressed
    (Debian's kernels unpack zstd initramfs images)."""
    names: list[str] = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories.sort()
        relative = os.path.relpath(directory, root)
        # A symbolic link to a directory (merged /usr's /bin -> usr/bin) is listed among the
        # subdirectories, and os.walk does not go into it: it is an entry of its own.
        linked = [name for name in subdirectories if os.path.islink(os.path.join(directory, name))]
        for name in (".", *files, *linked):
            os.utime(os.path.join(directory, name), (EPOCH, EPOCH), follow_symlinks=False)
            names.append(os.path.normpath(os.path.join(relative, name)))
    listing = "\0".join(sorted(names)).encode() + b"\0"
    with out.open("wb") as handle:
        cpio = subprocess.Popen(
            ["cpio", "--create", "--format=newc", "--null", "--reproducible", "--quiet"],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        zstd = subprocess.Popen(
            ["zstd", "-q", "-12", "-T0", "-c"], stdin=cpio.stdout, stdout=handle
        )
        assert cpio.stdin is not None
        assert cpio.stdout is not None
        cpio.stdout.close()  # zstd holds it now
        cpio.stdin.write(listing)
        cpio.stdin.close()
        cpio_status, zstd_status = cpio.wait(), zstd.wait()
    if cpio_status or zstd_status:
        detail = cpio.stderr.read().decode(errors="replace") if cpio.stderr else ""
        raise RamdiskError(f"writing the initramfs failed ({cpio_status}, {zstd_status}): {detail}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
