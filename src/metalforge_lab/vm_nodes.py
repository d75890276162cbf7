"""QEMU machines as the demo's nodes: servers that boot from their firmware.

``metalforge-lab demo --machines qemu`` (``make run VIRTUAL_NODES=N
LAB_MACHINES=qemu``) puts these where the namespace lab's nodes would be:
each node is a QEMU machine (software emulation, one CPU, 2 GiB, a 5 GiB
raw disk) on a bridge of its own, behind one Redfish BMC (the lab's
emulator, whose power, boot device and virtual media drive the machines).
Nothing runs the agent for them: they network-boot the ramdisk metalforge
serves through its DHCP service and iPXE scripts, as servers in a rack
would, and print to a console file each.

Slower than the namespace nodes (a boot of the ramdisk takes about a minute
under emulation) and heavier (2 GiB per running machine), which is why
they are an option. ``vms.json`` in the state directory records what runs,
so that ``clean_up`` can remove what a killed demo left.
"""

from __future__ import annotations

import ipaddress
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from metalforge_lab import namespaces
from metalforge_lab.lab import kill_leftover
from metalforge_lab.ports import free_port
from metalforge_lab.redfish_emulator import EmulatorProcess, FakeSystem

STATE_FILE = "vms.json"
MEMORY_MIB = 2048
DISK_BYTES = 5 << 30
"""The agent installs on a disk of 4 GiB or more; the raw file stays sparse."""
MAX_MACHINES = 4
"""Each running machine holds 2 GiB and most of a CPU while it boots."""


@dataclass(frozen=True)
class VmNode:
    """One machine as metalforge enrolls it, and where to watch it."""

    name: str
    mac: str
    redfish_address: str
    redfish_system_id: str
    disk: Path
    console: Path


class VmLab:
    """A bridge, one Redfish BMC, and ``nodes`` QEMU machines behind it."""

    def __init__(self, nodes: int, state_dir: Path, bridge: str, subnet: str) -> None:
        self.state_dir = state_dir
        self.bridge = namespaces.Bridge(bridge, ipaddress.IPv4Network(subnet))
        self.nodes: list[VmNode] = []
        self.errors: list[str] = []
        """The namespace lab's notices; machines report on their consoles instead."""
        self._count = nodes
        self._emulator: EmulatorProcess | None = None

    def start(self) -> None:
        """Build everything, or take down what was built and raise."""
        try:
            self._start()
        except BaseException:  # Ctrl-C mid-build too: take down what was built, re-raise
            self.stop()
            raise

    def _start(self) -> None:
        self.bridge.create()
        machines = self.state_dir / "machines"
        machines.mkdir(parents=True, exist_ok=True)
        systems = []
        for index in range(1, self._count + 1):
            name = f"vm-{index}"
            disk, console = machines / f"{name}.raw", machines / f"{name}.console.log"
            disk.unlink(missing_ok=True)
            with disk.open("wb") as handle:
                handle.truncate(DISK_BYTES)
            console.unlink(missing_ok=True)
            systems.append(
                FakeSystem(
                    uuid=str(uuid.uuid4()),
                    name=name,
                    macs=[f"52:54:00:6d:66:{index:02x}"],
                    machine={
                        "tap": f"{self.bridge.name}t{index}"[-15:],
                        "bridge": self.bridge.name,
                        "console": str(console),
                        "disk": str(disk),
                        "memory_mib": MEMORY_MIB,
                    },
                )
            )
        self._emulator = EmulatorProcess(self.state_dir / "bmc", free_port(), systems)
        self._emulator.start()
        self._record()
        for system in systems:
            assert system.machine is not None
            self.nodes.append(
                VmNode(
                    name=system.name,
                    mac=system.macs[0],
                    redfish_address=self._emulator.address,
                    redfish_system_id=self._emulator.system_path(system.uuid),
                    disk=Path(system.machine["disk"]),
                    console=Path(system.machine["console"]),
                )
            )

    def _record(self) -> None:
        assert self._emulator is not None
        assert self._emulator.process is not None
        state = {
            "emulator_pid": self._emulator.process.pid,
            "emulator_workdir": str(self._emulator.workdir),
            "bridge": self.bridge.name,
            "taps": [s.machine["tap"] for s in self._emulator.systems if s.machine],
        }
        (self.state_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    def stop(self) -> None:
        """Power every machine off (the emulator does, as it stops) and remove the bridge."""
        if self._emulator is not None:
            self._emulator.stop()
            self._emulator = None
        self.bridge.delete()
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)


def clean_up(state_dir: Path) -> list[str]:
    """Remove what a killed demo's machines left (emulator, QEMU processes, taps, bridge)."""
    state_file = state_dir / STATE_FILE
    if not state_file.exists():
        return []
    state = json.loads(state_file.read_text())
    removed = kill_leftover(
        "emulator", int(state.get("emulator_pid") or 0), str(state.get("emulator_workdir"))
    )
    for tap in state.get("taps", []):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                removed.extend(kill_leftover("machine", int(entry.name), f"ifname={tap},"))
        if namespaces.exists(tap):
            namespaces.ip("link", "del", tap, check=False)
            removed.append(tap)
    bridge = state.get("bridge")
    if bridge and namespaces.exists(bridge):
        namespaces.ip("link", "del", bridge)
        removed.append(bridge)
    state_file.unlink()
    return removed
