"""A QEMU virtual machine that boots from the lab's bridge or a CD, as a server would.

QEMU's virtio NIC carries an iPXE ROM (Debian's ``ipxe-qemu``): with ``-boot n``
the machine's firmware (SeaBIOS) runs it, it asks the network's DHCP service
for an address and a boot file, and boots whatever that leads to. Given a
``cdrom`` it boots that instead (a virtual-media boot), from SeaBIOS or,
with ``uefi``, from OVMF (Debian's ``ovmf``) on a copy of its variables;
without ``nic_rom``, OVMF network-boots the NIC itself, as a server's UEFI
firmware does (PXE, then whatever it loads over TFTP). Software
emulation only (``-accel tcg``): on the CI machines ``/dev/kvm`` exists but a
guest dies once it runs. The serial console goes to a file a test reads;
the machine has no disk unless given one.
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
        self.process: subprocess.Popen[bytes] | None = None

    def _nic_options(self) -> str:
        """Without its iPXE ROM the NIC is booted by the firmware's own PXE (OVMF's)."""
        if self.nic_rom:
            return ""
        return ",romfile=" + ("" if self.cdrom is not None else ",bootindex=1")

    def _firmware_and_boot(self) -> list[str]:
        args: list[str] = []
        if self.uefi:
            variables = self.console.with_name(f"{self.tap}-OVMF_VARS.fd")
            shutil.copyfile(OVMF_VARS, variables)
            args += [
                "-drive", f"if=pflash,format=raw,readonly=on,file={OVMF_CODE}",
                "-drive", f"if=pflash,format=raw,file={variables}",
            ]  # fmt: skip
        if self.cdrom is None:
            return [*args, "-boot", "n"]
        return [*args, "-drive", f"media=cdrom,readonly=on,file={self.cdrom}", "-boot", "d"]

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
                "-serial",
                f"file:{self.console}",
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
