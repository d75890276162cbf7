"""The ``ipmitool`` power and management interfaces of the ``ipmi`` hardware type.

They speak IPMI 2.0 (RMCP+, "lanplus") with pyghmi rather than running the
``ipmitool`` program, but keep Ironic's interface names and ``driver_info``
keys so nodes enrolled for Ironic work unchanged:

``ipmi_address`` (required), ``ipmi_port`` (623), ``ipmi_username``,
``ipmi_password``
    Where the BMC is and how to log in.
``ipmi_retries`` (2), ``ipmi_timeout`` (5)
    Tries after a first one the BMC did not answer, and seconds each try may
    take. A refused password is not retried: it cannot get better.
``ipmi_power_timeout`` (60)
    Seconds a power change may take when the request names no timeout.
``ipmi_boot_mode`` (``uefi`` or ``bios``)
    Whether a boot device is set with the EFI flag. Without it the node's
    ``boot_mode``, then ``boot_mode`` in ``properties.capabilities``, then
    ``uefi`` (Ironic's default) decide.

Every power change waits until the BMC reports the state reached, polling
with the task's interruptible sleep; a reboot is an off then an on, so the
wait sees both edges.
"""

from __future__ import annotations

from typing import Any

from metalforge.drivers.base import (
    POWER_OFF,
    POWER_ON,
    REBOOT,
    SOFT_POWER_OFF,
    SOFT_REBOOT,
    DriverError,
    DriverTask,
    ManagementInterface,
    PowerInterface,
)
from metalforge.drivers.bmc_guard import GUARD
from metalforge.drivers.ipmi import protocol
from metalforge.drivers.ipmi.client import SESSIONS, CallPolicy
from metalforge.drivers.ipmi.settings import IpmiSettings, parse_settings

_PROPERTIES = {
    "ipmi_address": "IP address or host name of the BMC. Required.",
    "ipmi_port": "UDP port of the BMC. Optional, default 623.",
    "ipmi_username": "User name to log in with. Optional (anonymous when empty).",
    "ipmi_password": "Password of that user. Optional.",
    "ipmi_retries": "Tries after the first one the BMC did not answer. Optional, default 2.",
    "ipmi_timeout": "Seconds one try may take. Optional, default 5.",
    "ipmi_power_timeout": "Seconds a power change may take by default. Optional, default 60.",
    "ipmi_boot_mode": "uefi or bios: how boot devices are set. Optional.",
}

_POLL_FIRST = 0.1
_POLL_MAX = 1.0


class _IpmiInterface:
    """What both interfaces share: settings from ``driver_info`` and calls through the pool."""

    def validate(self, task: DriverTask) -> None:
        parse_settings(task.node)

    def properties(self) -> dict[str, str]:
        return dict(_PROPERTIES)

    @staticmethod
    def _call(task: DriverTask, settings: IpmiSettings, operation: Any) -> Any:
        with GUARD.call("ipmi", str(settings.bmc)):
            return SESSIONS.call(
                settings.bmc,
                operation,
                CallPolicy(settings.retries, settings.timeout),
                pause=task.sleep,
            )


class IpmiPower(_IpmiInterface, PowerInterface):
    """Chassis power over IPMI."""

    name = "ipmitool"

    def get_power_state(self, task: DriverTask) -> str:
        settings = parse_settings(task.node)
        powered: bool = self._call(task, settings, protocol.chassis_powered)
        return POWER_ON if powered else POWER_OFF

    def set_power_state(self, task: DriverTask, target: str, timeout: int | None = None) -> None:
        settings = parse_settings(task.node)
        deadline = task.now() + (timeout or settings.power_timeout)
        if target == POWER_ON:
            self._switch(task, settings, protocol.POWER_ON, True, target, deadline)
        elif target == POWER_OFF:
            self._switch(task, settings, protocol.POWER_OFF, False, target, deadline)
        elif target == SOFT_POWER_OFF:
            self._switch(task, settings, protocol.SOFT_OFF, False, target, deadline)
        elif target in (REBOOT, SOFT_REBOOT):
            off = protocol.SOFT_OFF if target == SOFT_REBOOT else protocol.POWER_OFF
            self._switch(task, settings, off, False, target, deadline)
            self._switch(task, settings, protocol.POWER_ON, True, target, deadline)
        else:
            raise DriverError(f"the ipmitool power interface cannot reach {target!r}")

    def _switch(
        self,
        task: DriverTask,
        settings: IpmiSettings,
        control: int,
        powered: bool,
        target: str,
        deadline: float,
    ) -> None:
        """Send ``control`` unless the state is already reached, then wait for it."""
        if self._call(task, settings, protocol.chassis_powered) == powered:
            return
        self._call(task, settings, lambda command: protocol.chassis_control(command, control))
        delay = _POLL_FIRST
        while True:
            now_powered = self._call(task, settings, protocol.chassis_powered)
            if now_powered == powered:
                return
            remaining = deadline - task.now()
            if remaining <= 0:
                reported = POWER_ON if now_powered else POWER_OFF
                wanted = POWER_ON if powered else POWER_OFF
                raise DriverError(
                    f"IPMI BMC at {settings.bmc}: the node did not reach {wanted} "
                    f"(for {target}) in time; it still reports {reported}"
                )
            task.sleep(min(delay, remaining))
            delay = min(delay * 2, _POLL_MAX)


class IpmiManagement(_IpmiInterface, ManagementInterface):
    """Boot device over IPMI (system boot options parameter 5) and NMI.

    The boot mode and secure boot are not offered, as Ironic's ipmitool
    interface offers neither: a request for them ends in Ironic's
    "does not support" error as the node's ``last_error``. The boot mode a
    boot device is set with comes from ``ipmi_boot_mode`` (module docstring).
    """

    name = "ipmitool"

    def supported_boot_devices(self, task: DriverTask) -> list[str]:
        return list(protocol.BOOT_DEVICES)

    def get_boot_device(self, task: DriverTask) -> dict[str, Any]:
        settings = parse_settings(task.node)
        flags: protocol.BootFlags = self._call(task, settings, protocol.get_boot_flags)
        return {"boot_device": flags.device, "persistent": flags.persistent}

    def set_boot_device(self, task: DriverTask, device: str, persistent: bool = False) -> None:
        settings = parse_settings(task.node)
        if device not in protocol.BOOT_DEVICES:
            raise DriverError(
                f"the ipmitool management interface cannot boot from {device!r}; "
                f"supported: {', '.join(protocol.BOOT_DEVICES)}"
            )
        flags = protocol.BootFlags(device, persistent, uefi=settings.boot_mode == "uefi")
        self._call(task, settings, lambda command: protocol.set_boot_flags(command, flags))

    def inject_nmi(self, task: DriverTask) -> None:
        """Chassis control "pulse diagnostic interrupt", as ``ipmitool chassis power diag``."""
        settings = parse_settings(task.node)
        self._call(
            task,
            settings,
            lambda command: protocol.chassis_control(command, protocol.DIAGNOSTIC_INTERRUPT),
        )
