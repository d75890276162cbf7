"""``redfish`` inspection, out of band: what the BMC knows about the system.

Sets the node's ``cpus`` (logical CPUs: the processors' threads, or
``ProcessorSummary.Count`` when the processors do not say), ``cpu_arch``,
``memory_mb`` and, when the BMC reports disks (SimpleStorage), ``local_gb``
from the largest disk minus 1 GiB for partitioning, as Ironic does. A
property the BMC does not report is left as it was.

The NICs' MAC addresses are recorded in
``driver_internal_info.inspected_macs`` (lowercase, sorted): drivers have no
database access, so creating ports for them is left to the caller.
"""

from __future__ import annotations

from typing import Any

import sushy
from sushy import exceptions as sushy_errors

from metalforge.drivers.base import DriverTask, InspectInterface, StepOutcome
from metalforge.drivers.redfish import connection

_ARCH = {
    sushy.ProcessorArchitecture.X86: "x86_64",
    sushy.ProcessorArchitecture.ARM: "aarch64",
    sushy.ProcessorArchitecture.IA_64: "ia64",
    sushy.ProcessorArchitecture.MIPS: "mips64",
    sushy.ProcessorArchitecture.POWER: "ppc64le",
}
_32_BIT = {sushy.InstructionSet.X86: "i686", sushy.InstructionSet.ARM_A32: "armv7l"}
GIB = 1024**3


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


def _local_gb(system: Any) -> int | None:
    try:
        largest = system.simple_storage.max_size_bytes
    except (sushy_errors.MissingAttributeError, sushy_errors.ResourceNotFoundError):
        return None
    if not largest:
        return None
    # Leave a GiB for the partition table and the config drive, as Ironic does.
    return max(0, int(largest // GIB) - 1)


def _macs(system: Any) -> list[str]:
    try:
        members = system.ethernet_interfaces.get_members()
    except (sushy_errors.MissingAttributeError, sushy_errors.ResourceNotFoundError):
        return []
    return sorted({str(nic.mac_address).lower() for nic in members if nic.mac_address})


class RedfishInspect(InspectInterface):
    """Read CPUs, memory, disks and NICs from the BMC; no ramdisk is booted."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    def inspect_hardware(self, task: DriverTask) -> StepOutcome:
        with connection.system(task, "inspect the hardware") as system:
            cpus, arch = _cpus(system)
            memory_gib = system.memory_summary.size_gib if system.memory_summary else None
            local_gb = _local_gb(system)
            macs = _macs(system)
        found: dict[str, Any] = {
            "cpus": cpus,
            "cpu_arch": arch,
            "memory_mb": int(memory_gib * 1024) if memory_gib else None,
            "local_gb": local_gb,
        }
        task.node.properties = {
            **task.node.properties,
            **{key: value for key, value in found.items() if value is not None},
        }
        task.node.driver_internal_info = {
            **task.node.driver_internal_info,
            "inspected_macs": macs,
        }
        task.record("inspection", f"redfish inspection found {found} and {len(macs)} NIC(s)")
        return "done"
