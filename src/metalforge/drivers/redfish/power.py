"""``redfish`` power: ComputerSystem.Reset, then poll PowerState until the target is reached.

Transitional states: ``get_power_state`` reports ``PoweringOn`` as power on
and ``PoweringOff`` as power off, the state the machine is committed to, so
a status poll during a slow transition does not flap between values. The
wait after a change is stricter: it returns only once the BMC reports the
final ``On`` or ``Off``.

Reboots: when the node is off, a (soft) reboot powers it on, since a
restart of a machine that is off means nothing to most BMCs. Redfish cannot
show that a restart of a running machine happened (it stays ``On``), so a
reboot is done once the BMC accepted it and reports ``On``.
"""

from __future__ import annotations

from typing import Any

import sushy

from metalforge.drivers.base import (
    POWER_OFF,
    POWER_ON,
    REBOOT,
    SOFT_POWER_OFF,
    SOFT_REBOOT,
    DriverError,
    DriverTask,
    PowerInterface,
)
from metalforge.drivers.redfish import connection

DEFAULT_TIMEOUT = 60
"""Seconds to wait for a power change when the request gives no timeout."""
POLL_FIRST = 0.1
POLL_MAX = 2.0
"""Polling starts fast (the emulator and many BMCs switch in well under a second) and backs off."""

_REPORTED = {
    sushy.PowerState.ON: POWER_ON,
    sushy.PowerState.POWERING_ON: POWER_ON,
    sushy.PowerState.OFF: POWER_OFF,
    sushy.PowerState.POWERING_OFF: POWER_OFF,
}
_FINAL = {POWER_ON: sushy.PowerState.ON, POWER_OFF: sushy.PowerState.OFF}


def _state_name(value: Any) -> str:
    return str(getattr(value, "value", value))


def _reset_for(target: str, current: Any) -> Any | None:
    """The ResetType that moves a system in ``current`` to ``target``.

    None: the system is there or already on its way (only the wait is left).
    """
    is_off = current in (sushy.PowerState.OFF, sushy.PowerState.POWERING_OFF)
    if target == POWER_ON:
        return None if _REPORTED.get(current) == POWER_ON else sushy.ResetType.ON
    if target == POWER_OFF:
        return None if is_off else sushy.ResetType.FORCE_OFF
    if target == SOFT_POWER_OFF:
        return None if is_off else sushy.ResetType.GRACEFUL_SHUTDOWN
    if target == REBOOT:
        return sushy.ResetType.ON if is_off else sushy.ResetType.FORCE_RESTART
    if target == SOFT_REBOOT:
        return sushy.ResetType.ON if is_off else sushy.ResetType.GRACEFUL_RESTART
    raise DriverError(f"unknown power target {target!r}")


def wait_for_power(task: DriverTask, wanted: str, timeout: float, doing: str) -> None:
    """Poll the node's power state until it is ``wanted`` (power on/off) or ``timeout`` expires.

    Each poll is a call of its own, so the BMC's slot (``bmc_guard``) is free
    between polls for the other nodes behind the same BMC.
    """
    final = _FINAL[wanted]
    deadline = task.now() + timeout
    delay = POLL_FIRST
    while True:
        with connection.system(task, f"read the power state after {doing}") as system:
            state = system.power_state
        if state == final:
            return
        remaining = deadline - task.now()
        if remaining <= 0:
            raise DriverError(
                f"Timed out after {timeout:g} s waiting for the node to reach {wanted!r} "
                f"after {doing}; the BMC still reports {_state_name(state)!r}"
            )
        task.sleep(min(delay, remaining))
        delay = min(delay * 2, POLL_MAX)


class RedfishPower(PowerInterface):
    """Power through the BMC's ComputerSystem.Reset action."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    def get_power_state(self, task: DriverTask) -> str:
        with connection.system(task, "read the power state") as system:
            state = system.power_state
        try:
            return _REPORTED[state]
        except KeyError:
            raise DriverError(
                f"Redfish BMC reports power state {_state_name(state)!r} for the node, "
                "which is neither on nor off"
            ) from None

    def set_power_state(self, task: DriverTask, target: str, timeout: int | None = None) -> None:
        wanted = POWER_OFF if target in (POWER_OFF, SOFT_POWER_OFF) else POWER_ON
        with connection.system(task, target) as system:
            reset = _reset_for(target, system.power_state)
            if reset is None:
                if system.power_state == _FINAL[wanted]:
                    return
                doing = f"a transition already under way ({_state_name(system.power_state)})"
            else:
                system.reset_system(reset)
                doing = _state_name(reset)
        wait_for_power(task, wanted, timeout or DEFAULT_TIMEOUT, doing)
