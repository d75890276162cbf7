"""``redfish`` inspection, out of band: what the BMC knows about the system.

What the BMC reports becomes an inventory in the agent's format: the CPU
count (logical CPUs: the processors' threads, or ``ProcessorSummary.Count``
when the processors do not say) and architecture, the memory, the drives
(Storage, else SimpleStorage), the NICs, the vendor and the boot mode. The
conductor processes it as it processes an agent's report, as Ironic's redfish
inspection runs its hooks and rules on the inventory it builds: properties
(``local_gb`` from the root disk, a diskless node's 0), a port per NIC,
inspection rules and the stored data.
"""

from __future__ import annotations

from typing import Any

import sushy
from sushy import exceptions as sushy_errors

from metalforge.drivers.base import Collected, DriverTask, InspectInterface
from metalforge.drivers.redfish import connection

_ARCH = {
    sushy.ProcessorArchitecture.X86: "x86_64",
    sushy.ProcessorArchitecture.ARM: "aarch64",
    sushy.ProcessorArchitecture.IA_64: "ia64",
    sushy.ProcessorArchitecture.MIPS: "mips64",
    sushy.ProcessorArchitecture.POWER: "ppc64le",
}
_32_BIT = {sushy.InstructionSet.X86: "i686", sushy.InstructionSet.ARM_A32: "armv7l"}
_BOOT_MODES = {
    sushy.BootSourceOverrideMode.UEFI: "uefi",
    sushy.BootSourceOverrideMode.LEGACY: "bios",
}


def _cpus(system: Any) -> tuple[int | None, str | None]:
    count: int | None = None
    arch: str | None = None
    try:
        processors = system.processors
        summary = processors.summary
        count = summary.count or None
        arch = _ARCH.get(summary.architecture)
        members = processors.get_members()
    except (sushy_errors.MissingAttributeError, sushy_errors.ResourceNotFoundError):
        members = []
    for proc in members:
        narrow = _32_BIT.get(proc.instruction_set)
        if narrow:
            arch = narrow
            break
    if count is None and system.json.get("ProcessorSummary", {}).get("Count"):
        count = int(system.json["ProcessorSummary"]["Count"])
    return count, arch


def _disks(system: Any) -> list[dict[str, Any]] | None:
    """The drives the BMC reports (Storage, else SimpleStorage, as Ironic reads them),
    as the agent lists disks; None when it reports neither. Many BMCs advertise a
    collection they then fail to serve: that one is passed over."""
    for collection, listed in (("storage", "drives"), ("simple_storage", "devices")):
        try:
            disks = [
                {"name": str(drive.name or drive.identity), "size": int(drive.capacity_bytes)}
                for member in getattr(system, collection).get_members()
                for drive in getattr(member, listed) or ()
                if drive.capacity_bytes
            ]
        except sushy_errors.SushyError:
            continue
        if disks:
            return disks
    return None


def _interfaces(system: Any) -> list[dict[str, Any]]:
    try:
        members = system.ethernet_interfaces.get_members()
    except (sushy_errors.MissingAttributeError, sushy_errors.ResourceNotFoundError):
        return []
    return [
        {"name": str(nic.identity), "mac_address": str(nic.mac_address).lower()}
        for nic in members
        if nic.mac_address
    ]


def _vendor(system: Any) -> dict[str, str]:
    found = {
        "manufacturer": system.manufacturer,
        "product_name": system.model,
        "serial_number": system.serial_number,
    }
    return {key: str(value) for key, value in found.items() if value}


def inventory_of(system: Any) -> dict[str, Any]:
    """What the BMC knows about ``system``, in the agent's inventory format."""
    cpus, arch = _cpus(system)
    memory_gib = system.memory_summary.size_gib if system.memory_summary else None
    inventory: dict[str, Any] = {
        "cpu": {"count": cpus or 0, "architecture": arch or ""},
        "interfaces": _interfaces(system),
    }
    if memory_gib:
        inventory["memory"] = {"physical_mb": int(memory_gib * 1024)}
    disks = _disks(system)
    if disks is not None:
        inventory["disks"] = disks
    vendor = _vendor(system)
    if vendor:
        inventory["system_vendor"] = vendor
    mode = _BOOT_MODES.get(system.boot.mode) if system.boot else None
    if mode is not None:
        inventory["boot"] = {"current_boot_mode": mode}
    return inventory


class RedfishInspect(InspectInterface):
    """Read CPUs, memory, disks and NICs from the BMC; no ramdisk is booted. What it
    reads is processed as an agent's report is (properties, ports, rules, stored data)."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    def inspect_hardware(self, task: DriverTask) -> Collected:
        with connection.system(task, "inspect the hardware") as system:
            inventory = inventory_of(system)
        return Collected({"inventory": inventory})
