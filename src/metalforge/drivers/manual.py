"""``manual-management``: a machine whose power and boot order an operator handles by hand.

For a server with no BMC metalforge can drive (or one whose BMC misbehaves),
as Ironic's hardware type of that name: the operator powers the machine on
and off when the flow needs it, and its boot order is set once, network
first then disk, so the agent's ramdisk boots whenever the network offers
it and the instance otherwise. Everything else is the agent's, as on any
real hardware type: cleaning, inspection and deployment over the network.

Power is ``fake`` (it records the state a flow asked for; the operator makes
it true) and management ``noop`` (a boot device request is accepted and
changes nothing), or ``fake`` management.
"""

from __future__ import annotations

from typing import Any

from metalforge.drivers.base import DriverError, DriverTask, ManagementInterface

_BOOT_ORDER = ("pxe", "disk")
"""The boot order the machine must be set to: the network, then its disk."""


class NoopManagement(ManagementInterface):
    """Accepts every boot device request and changes nothing: the boot order is the
    operator's, set once to ``_BOOT_ORDER``."""

    name = "noop"

    def validate(self, task: DriverTask) -> None:
        return None

    def supported_boot_devices(self, task: DriverTask) -> list[str]:
        return list(_BOOT_ORDER)

    def get_boot_device(self, task: DriverTask) -> dict[str, Any]:
        return {"boot_device": "pxe", "persistent": True}

    def set_boot_device(self, task: DriverTask, device: str, persistent: bool = False) -> None:
        if device not in _BOOT_ORDER:
            raise DriverError(
                f"Invalid boot device {device} specified, supported are {', '.join(_BOOT_ORDER)}."
            )
