"""A QEMU virtual machine that boots from the lab's bridge or a CD, as a server would.

QEMU's virtio NIC carries an iPXE ROM (Debian's ``ipxe-qemu``): with ``-boot n``
the machine's firmware (SeaBIOS) runs it, it asks the network's DHCP service
for an address and a boot file, and boots whatever that leads to. Given a
``cdrom`` it boots that instead (a virtual-media boot), from SeaBIOS or,
with ``uefi``, from OVMF (Debian's ``ovmf``) on a copy of its variables;
without ``nic_rom``, OVMF network-boots the NIC itself, as a server's UEFI
firmware does (PXE, then whatever it loads over TFTP). Given a ``disk`` (a
raw file) it has a virtio disk, and ``boot="disk"`` boots from it, as a
deployed server does (``boot`` defaults to the CD when there is one, else
the network). Software
emulation only (``-accel tcg``): on the CI machines ``/dev/kvm`` exists but a
guest dies once it runs. The serial console is appended to a file a test
reads (every boot of the machine, in order). A reboot the guest asks for
ends the process, as a power-off does: whoever powers it decides what it
boots next.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path

from metalforge_lab.namespaces import ip

QEMU = "qemu-system-x86_64"
OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
STARTUP_CHECK = 1.0
"""Seconds in which QEMU refuses its options, if it does: the caller hears why."""


def available() -> str | None:
    """Why a VM cannot start here, or ``None`` when it can."""
    if shutil.which(QEMU) is None:
        return f"{QEMU} is not installed (Debian's qemu-system-x86)"
    if (
        not Path("/usr/lib/ipxe/qemu/efi-virtio.rom").exists()
        and not Path("/usr/lib/ipxe/qemu/pxe-virtio.rom").exists()
    ):
        return "QEMU's iPXE ROMs are not installed (Debian's ipxe-qemu)"
    return None


class NetbootVm:
    """One machine with one NIC (``mac``) on ``bridge``, through a tap of its own."""

    def __init__(
        self,
        name: str,
        mac: str,
        bridge: str,
        console: Path,
        memory_mib: int = 512,
        *,
        cdrom: Path | None = None,
        uefi: bool = False,
        nic_rom: bool = True,
        disk: Path | None = None,
        boot: str | None = None,
        http_boot: bool = False,
    ):
        if len(name) > 15:
            raise ValueError(f"tap name {name!r} is longer than 15 characters")
        self.tap = name
        self.mac = mac
        self.bridge = bridge
        self.console = console
        self.memory_mib = memory_mib
        self.cdrom = cdrom
        self.uefi = uefi
        self.nic_rom = nic_rom
        if http_boot and (not uefi or nic_rom):
            raise ValueError("UEFI HTTP boot is the firmware's: it needs uefi and no NIC ROM")
        self.http_boot = http_boot
        self.disk = disk
        if boot is None:  # what the machine has that boots: its CD, else the network
            boot = "network" if cdrom is None else "cd"
        if boot not in ("network", "cd", "disk"):
            raise ValueError(f"boot must be network, cd or disk, not {boot!r}")
        if boot == "cd" and cdrom is None:
            raise ValueError("booting from the CD needs a cdrom")
        if boot == "disk" and disk is None:
            raise ValueError("booting from the disk needs a disk")
        self.boot = boot
        self.process: subprocess.Popen[bytes] | None = None

    def _nic_options(self) -> str:
        """Without its iPXE ROM the NIC is booted by the firmware's own PXE (OVMF's)."""
        if self.nic_rom:
            return ""
        return ",romfile=" + (",bootindex=1" if self.boot == "network" else "")

    def _firmware_and_boot(self) -> list[str]:
        args: list[str] = []
        if self.uefi:
            variables = self.console.with_name(f"{self.tap}-OVMF_VARS.fd")
            shutil.copyfile(OVMF_VARS, variables)
            args += [
                "-drive", f"if=pflash,format=raw,readonly=on,file={OVMF_CODE}",
                "-drive", f"if=pflash,format=raw,file={variables}",
            ]  # fmt: skip
        if self.http_boot:
            # OVMF tries PXE before HTTP boot on a NIC; without PXE it boots over HTTP.
            args += [
                "-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=no",
                "-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=no",
            ]  # fmt: skip
        if self.disk is not None:
            args += [
                "-drive", f"if=none,id=disk0,format=raw,file={self.disk}",
                "-device", "virtio-blk-pci,drive=disk0,serial=MFDISK0",
            ]  # fmt: skip
        if self.cdrom is not None:
            args += ["-drive", f"media=cdrom,readonly=on,file={self.cdrom}"]
        return [*args, "-boot", {"network": "n", "cd": "d", "disk": "c"}[self.boot]]

    def power_on(self) -> None:
        """Create the tap on the bridge and start the machine, booting from the network
        (or from its CD)."""
        ip("tuntap", "add", self.tap, "mode", "tap")
        ip("link", "set", self.tap, "master", self.bridge)
        ip("link", "set", self.tap, "up")
        self.process = subprocess.Popen(
            [
                QEMU,
                "-accel",
                "tcg",
                "-m",
                str(self.memory_mib),
                "-smp",
                "1",
                "-nographic",
                "-nodefaults",
                "-no-reboot",
                "-chardev",
                f"file,id=console,path={self.console},append=on",
                "-serial",
                "chardev:console",
                *self._firmware_and_boot(),
                "-netdev",
                f"tap,id=n0,ifname={self.tap},script=no,downscript=no",
                "-device",
                f"virtio-net-pci,netdev=n0,mac={self.mac}{self._nic_options()}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(STARTUP_CHECK)
            _, error = self.process.communicate()
            ip("link", "del", self.tap, check=False)
            raise RuntimeError(f"QEMU did not start: {error.decode(errors='replace').strip()}")

    def console_text(self) -> str:
        try:
            return self.console.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_console(self, text: str, timeout: float) -> str:
        """Until the console shows ``text`` (``TimeoutError`` with its tail otherwise)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = self.console_text()
            if text in shown:
                return shown
            if self.process is not None and self.process.poll() is not None and text not in shown:
                break
            time.sleep(0.5)
        tail = self.console_text()[-3000:]
        raise TimeoutError(f"the VM's console never showed {text!r}; it ends with:\n{tail}")

    def power_off(self) -> None:
        """Kill the machine and remove its tap."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
            self.process = None
        ip("link", "del", self.tap, check=False)
