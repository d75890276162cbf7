"""A tiny ramdisk that stands in for the agent's in network-boot tests: it proves the path.

Built from two Debian packages (a cloud kernel and static busybox, fetched
with ``apt-get download`` and unpacked, no install hooks run): the kernel,
and an initramfs whose ``/init`` loads the virtio network drivers, takes an
address by DHCP, reads ``ipa-api-url`` and ``BOOTIF`` from its command line
and looks itself up there as the agent does (``GET /v1/lookup``). It prints
what it saw to the serial console between markers a test reads, then powers
the machine off. It is not the agent: what it shows is that a machine booted
from the network through metalforge's scripts reaches metalforge with the
parameters the real agent would get.
"""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("linux-image-6.1.0-56-cloud-amd64", "busybox-static")
"""What the ramdisk is made of; the kernel's version is pinned so that the build is
the same on every machine of this kind."""

NET_MODULES = ("virtio_pci", "virtio_net")
"""The drivers of QEMU's virtio NIC (modules in Debian's cloud kernel), loaded with
what they depend on."""

MARK = "METALFORGE-TINY-RAMDISK"
"""Prefix of the lines the ramdisk prints for the test: ``MARK cmdline ...``,
``MARK address ...``, ``MARK lookup <status> <body>``."""

_INIT = f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# Only emergencies on the console: a kernel message written in the middle of a
# MARK line would cut the report the test reads.
dmesg -n 1
echo "{MARK} cmdline $(cat /proc/cmdline)"
for module in $(cat /etc/modules-in-order); do insmod "/lib/modules/$module"; done
API=""
MAC=""
for param in $(cat /proc/cmdline); do
  case "$param" in
    ipa-api-url=*) API="${{param#ipa-api-url=}}" ;;
    BOOTIF=*) MAC="${{param#BOOTIF=}}" ;;
  esac
done
IFACE=""
for dev in /sys/class/net/*; do
  if [ "$(cat "$dev/address")" = "$MAC" ]; then IFACE="$(basename "$dev")"; fi
done
# Booted from virtual media nobody says which interface: the first one, as the agent would.
if [ -z "$MAC" ]; then
  for dev in /sys/class/net/*; do
    if [ "$(basename "$dev")" != lo ] && [ -z "$IFACE" ]; then
      IFACE="$(basename "$dev")"; MAC="$(cat "$dev/address")"
    fi
  done
fi
echo "{MARK} interface ${{IFACE:-none}} for $MAC"
ip link set lo up
ip link set "$IFACE" up
udhcpc -i "$IFACE" -n -q -t 20 -T 1 -s /etc/udhcpc.script
echo "{MARK} address $(ip -4 -o addr show dev "$IFACE")"
wget -q -O /lookup.json --header "X-OpenStack-Ironic-API-Version: 1.68" \\
  "$API/v1/lookup?addresses=$MAC" && STATUS=ok || STATUS=failed
echo "{MARK} lookup $STATUS $(cat /lookup.json 2>/dev/null)"
echo "{MARK} done"
poweroff -f
"""

_UDHCPC_SCRIPT = """#!/bin/sh
case "$1" in
  bound|renew)
    ip addr add "$ip/$mask" dev "$interface"
    if [ -n "$router" ]; then ip route add default via "${router%% *}" dev "$interface"; fi
    ;;
esac
exit 0
"""


@dataclass(frozen=True)
class TinyRamdisk:
    kernel: Path
    initramfs: Path

    @property
    def busybox(self) -> Path:
        """The static busybox the initramfs is made of, kept for other tiny systems."""
        return self.kernel.parent / "busybox"


def build(workdir: Path) -> TinyRamdisk:
    """The kernel and initramfs in ``workdir`` (built once; later calls reuse them)."""
    kernel, initramfs = workdir / "vmlinuz", workdir / "initramfs.gz"
    if kernel.exists() and initramfs.exists() and (workdir / "busybox").exists():
        return TinyRamdisk(kernel, initramfs)
    workdir.mkdir(parents=True, exist_ok=True)
    unpacked = workdir / "unpacked"
    if unpacked.exists():
        shutil.rmtree(unpacked)
    unpacked.mkdir()
    downloads = workdir / "debs"
    downloads.mkdir(exist_ok=True)
    subprocess.run(
        ["apt-get", "download", *PACKAGES],
        cwd=downloads,
        check=True,
        capture_output=True,
        timeout=300,
    )
    for deb in sorted(downloads.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True, timeout=120)
    [vmlinuz] = sorted((unpacked / "boot").glob("vmlinuz-*"))
    [modules] = sorted((unpacked / "lib" / "modules").iterdir())
    files = _initramfs_files(unpacked / "bin" / "busybox", modules)
    temporary = initramfs.with_suffix(".tmp")
    temporary.write_bytes(gzip.compress(newc_archive(files), compresslevel=6, mtime=0))
    shutil.copyfile(unpacked / "bin" / "busybox", workdir / "busybox")
    shutil.copyfile(vmlinuz, workdir / "vmlinuz.tmp")
    (workdir / "vmlinuz.tmp").replace(kernel)
    temporary.replace(initramfs)
    shutil.rmtree(unpacked)
    return TinyRamdisk(kernel, initramfs)


def _initramfs_files(busybox: Path, modules: Path) -> dict[str, tuple[int, bytes]]:
    """Path in the archive -> (mode, content); directories have content ``b""`` and a
    directory mode."""
    files: dict[str, tuple[int, bytes]] = {}
    for directory in ("bin", "dev", "etc", "lib", "lib/modules", "proc", "sys"):
        files[directory] = (0o040755, b"")
    files["bin/busybox"] = (0o100755, busybox.read_bytes())
    files["init"] = (0o100755, _INIT.encode())
    files["etc/udhcpc.script"] = (0o100755, _UDHCPC_SCRIPT.encode())
    order = module_order(modules, NET_MODULES)
    for name in order:
        files[f"lib/modules/{name}.ko"] = (0o100644, _module_path(modules, name).read_bytes())
    files["etc/modules-in-order"] = (0o100644, "".join(f"{n}.ko\n" for n in order).encode())
    return files


def _module_path(modules: Path, name: str) -> Path:
    found = sorted(modules.rglob(f"{name}.ko"))
    if not found:
        raise FileNotFoundError(f"module {name} is not in {modules}")
    return found[0]


def _depends(module: Path) -> list[str]:
    """The modules ``module`` needs loaded first, from its ``.modinfo`` ``depends=`` entry."""
    content = module.read_bytes()
    start = content.find(b"\0depends=")
    if start < 0:
        return []
    end = content.index(b"\0", start + 1)
    listed = content[start + len(b"\0depends=") : end].decode()
    return [name.replace("-", "_") for name in listed.split(",") if name]


def module_order(modules: Path, wanted: tuple[str, ...]) -> list[str]:
    """``wanted`` and everything they depend on, each after its dependencies."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dependency in _depends(_module_path(modules, name)):
            visit(dependency)
        order.append(name)

    for name in wanted:
        visit(name)
    return order


def newc_archive(files: dict[str, tuple[int, bytes]]) -> bytes:
    """A cpio archive in the ``newc`` format the kernel unpacks as an initramfs."""
    out = io.BytesIO()
    for inode, (name, (mode, content)) in enumerate(sorted(files.items()), start=1):
        _entry(out, name, mode, content, inode)
    _entry(out, "TRAILER!!!", 0, b"", 0)
    return out.getvalue()


def _entry(out: io.BytesIO, name: str, mode: int, content: bytes, inode: int) -> None:
    encoded = name.encode() + b"\0"
    fields = (inode, mode, 0, 0, 1, 0, len(content), 0, 0, 0, 0, len(encoded), 0)
    out.write(b"070701" + b"".join(f"{value:08x}".encode() for value in fields))
    out.write(encoded)
    out.write(b"\0" * (-(110 + len(encoded)) % 4))
    out.write(content)
    out.write(b"\0" * (-len(content) % 4))
