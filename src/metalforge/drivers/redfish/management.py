"""``redfish`` management: boot device override and boot mode.

Boot devices map to ``BootSourceOverrideTarget`` values; the devices offered
are those the BMC lists in ``BootSourceOverrideTarget@Redfish.AllowableValues``
(sushy-emulator, for one, has no ``BiosSetup``), so an unsupported device is
refused before anything is sent.

Persistence is ``BootSourceOverrideEnabled``: ``Once`` or ``Continuous``.
``get_boot_device`` reports what the BMC says, not what was asked: some BMCs
(sushy-emulator among them) accept ``Once`` and read back ``Continuous``.
"""

from __future__ import annotations

from typing import Any

import sushy

from metalforge.drivers.base import DriverError, DriverTask, ManagementInterface
from metalforge.drivers.redfish import connection

BOOT_SOURCES: dict[str, Any] = {
    "pxe": sushy.BootSource.PXE,
    "disk": sushy.BootSource.HDD,
    "cdrom": sushy.BootSource.CD,
    "bios": sushy.BootSource.BIOS_SETUP,
    "uefi http": sushy.BootSource.UEFI_HTTP,
}
"""metalforge boot device -> Redfish boot source."""
_DEVICES = {source: device for device, source in BOOT_SOURCES.items()}

BOOT_MODES: dict[str, Any] = {
    "uefi": sushy.BootSourceOverrideMode.UEFI,
    "bios": sushy.BootSourceOverrideMode.LEGACY,
}
"""Node ``boot_mode`` values -> Redfish BootSourceOverrideMode."""
_MODES = {mode: name for name, mode in BOOT_MODES.items()}


def supported_devices(system: Any) -> list[str]:
    allowed = system.get_allowed_system_boot_source_values()
    return [device for device, source in BOOT_SOURCES.items() if source in allowed]


def set_boot_device(system: Any, device: str, persistent: bool) -> None:
    """Set the override on an open ``system`` (shared with the virtual media boot)."""
    supported = supported_devices(system)
    if device not in supported:
        raise DriverError(
            f"Boot device {device!r} is not supported by this node's BMC; "
            f"supported: {', '.join(supported) or 'none'}"
        )
    enabled = (
        sushy.BootSourceOverrideEnabled.CONTINUOUS
        if persistent
        else sushy.BootSourceOverrideEnabled.ONCE
    )
    system.set_system_boot_options(BOOT_SOURCES[device], enabled=enabled)


class RedfishManagement(ManagementInterface):
    """Boot device and boot mode through the system's ``Boot`` property."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    def supported_boot_devices(self, task: DriverTask) -> list[str]:
        with connection.system(task, "list the boot devices") as system:
            return supported_devices(system)

    def get_boot_device(self, task: DriverTask) -> dict[str, Any]:
        with connection.system(task, "read the boot device") as system:
            boot = system.boot
            target = boot.target if boot else None
            enabled = boot.enabled if boot else None
        if enabled in (None, sushy.BootSourceOverrideEnabled.DISABLED):
            # No override: the machine follows its own boot order.
            return {"boot_device": None, "persistent": None}
        return {
            "boot_device": _DEVICES.get(target),
            "persistent": enabled == sushy.BootSourceOverrideEnabled.CONTINUOUS,
        }

    def set_boot_device(self, task: DriverTask, device: str, persistent: bool = False) -> None:
        with connection.system(task, f"set the boot device to {device}") as system:
            set_boot_device(system, device, persistent)

    def get_boot_mode(self, task: DriverTask) -> str | None:
        """``uefi``, ``bios``, or None when the BMC does not say."""
        with connection.system(task, "read the boot mode") as system:
            mode = system.boot.mode if system.boot else None
        return _MODES.get(mode)

    def set_boot_mode(self, task: DriverTask, mode: str) -> None:
        """Switch to ``uefi`` or ``bios`` and record it as the node's ``boot_mode``."""
        if mode not in BOOT_MODES:
            raise DriverError(
                f"Invalid boot mode {mode!r}; expected one of {', '.join(BOOT_MODES)}"
            )
        with connection.system(task, f"set the boot mode to {mode}") as system:
            system.set_system_boot_options(mode=BOOT_MODES[mode])
        task.node.boot_mode = mode
