"""The few IPMI requests the interfaces need, as raw chassis commands.

Raw requests rather than pyghmi's helpers: ``set_power(wait=True)`` polls
without a way to stop it, and the boot helpers cannot report "no override",
which a one-time boot device becomes once the node has booted. Byte layouts
follow the IPMI 2.0 specification (chassis commands, boot options
parameter 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metalforge.drivers.ipmi.client import raw

CHASSIS = 0x00
GET_CHASSIS_STATUS = 0x01
CHASSIS_CONTROL = 0x02
SET_BOOT_OPTIONS = 0x08
GET_BOOT_OPTIONS = 0x09

POWER_OFF = 0x00
POWER_ON = 0x01
SOFT_OFF = 0x05
"""ACPI soft shutdown: the OS is asked to shut down."""
DIAGNOSTIC_INTERRUPT = 0x04
"""Pulse a diagnostic interrupt: the NMI ``ipmitool chassis power diag`` sends."""

_FLAGS_PARAMETER = 5
_VALID_BIT_CLEARING = 3
_KEEP_VALID_AFTER_TIMEOUT = 0x08
"""Do not let the BMC drop the override 60 s after it is set (what ipmitool and Ironic do)."""
_VALID = 0x80
_PERSISTENT = 0x40
_EFI = 0x20

_SELECTORS = {"pxe": 0x1, "disk": 0x2, "safe": 0x3, "cdrom": 0x5, "bios": 0x6}
BOOT_DEVICES = tuple(_SELECTORS)
"""Boot devices this interface can set, in metalforge's (Ironic's) names."""
_DEVICES = {selector: name for name, selector in _SELECTORS.items()}


@dataclass(frozen=True)
class BootFlags:
    """Boot options parameter 5 as metalforge reads it; ``device`` None: no override."""

    device: str | None
    persistent: bool | None
    uefi: bool = False

    def encode(self) -> tuple[int, ...]:
        if self.device is None:
            return (0, 0, 0, 0, 0)
        first = _VALID | (_PERSISTENT if self.persistent else 0) | (_EFI if self.uefi else 0)
        return (first, _SELECTORS[self.device] << 2, 0, 0, 0)

    @classmethod
    def decode(cls, data: bytes) -> BootFlags:
        """From the five parameter bytes; an override that is not valid counts as none."""
        if len(data) < 2 or not data[0] & _VALID:
            return cls(None, None)
        device = _DEVICES.get((data[1] >> 2) & 0x0F)
        if device is None:
            return cls(None, None)
        return cls(device, bool(data[0] & _PERSISTENT), bool(data[0] & _EFI))


def chassis_powered(command: Any) -> bool:
    """Whether the system is powered on (Get Chassis Status, byte 1 bit 0)."""
    return bool(raw(command, CHASSIS, GET_CHASSIS_STATUS)[0] & 0x01)


def chassis_control(command: Any, control: int) -> None:
    raw(command, CHASSIS, CHASSIS_CONTROL, (control,))


def get_boot_flags(command: Any) -> BootFlags:
    # Response: parameter version, parameter selector, then the five data bytes.
    response = raw(command, CHASSIS, GET_BOOT_OPTIONS, (_FLAGS_PARAMETER, 0, 0))
    return BootFlags.decode(response[2:])


def set_boot_flags(command: Any, flags: BootFlags) -> None:
    raw(command, CHASSIS, SET_BOOT_OPTIONS, (_VALID_BIT_CLEARING, _KEEP_VALID_AFTER_TIMEOUT))
    raw(command, CHASSIS, SET_BOOT_OPTIONS, (_FLAGS_PARAMETER, *flags.encode()))
