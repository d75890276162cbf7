"""Verification (``manage`` from ``enroll``): check the BMC answers with its credentials."""

from __future__ import annotations

from metalforge import states
from metalforge.conductor import history
from metalforge.conductor.bmc_retry import retried
from metalforge.conductor.flows.common import fail, forget_progress, power
from metalforge.conductor.flows.spec import FlowSpec, FlowState, Verb
from metalforge.conductor.task import NodeTask
from metalforge.drivers.base import BiosInterface, DriverError, FirmwareInterface


def verify(task: NodeTask) -> None:
    """verifying: read the power state, which proves the address and credentials."""
    try:
        iface = power(task)
        iface.validate(task)
        task.node.power_state = retried(
            task, "read the power state", lambda: iface.get_power_state(task)
        )
    except DriverError as exc:
        fail(task, f"Failed to verify node: {exc}", str(exc))
        return
    _cache_bios_settings(task)
    _cache_firmware_components(task)
    task.transition(states.DONE, last_error=None)


def _cache_bios_settings(task: NodeTask) -> None:
    """Read the BIOS settings once the BMC is known to answer, so the API shows them from
    the start; a BMC without BIOS settings does not fail verification (history says so)."""
    bios = task.ctx.drivers.interface(task.node, "bios")
    if not isinstance(bios, BiosInterface):
        return
    try:
        bios.cache_bios_settings(task)
    except DriverError as exc:
        task.record("bios", f"BIOS settings could not be read: {exc}", history.WARNING)


def _cache_firmware_components(task: NodeTask) -> None:
    """The firmware versions, read as the BIOS settings are (a failure is only noted)."""
    firmware = task.ctx.drivers.interface(task.node, "firmware")
    if not isinstance(firmware, FirmwareInterface):
        return
    try:
        firmware.cache_firmware_components(task)
    except DriverError as exc:
        task.record("firmware", f"firmware versions could not be read: {exc}", history.WARNING)


SPEC = FlowSpec(
    name="verify",
    verbs=(Verb(states.MANAGE, since=(1, 4), intent=forget_progress),),
    states={states.VERIFYING: FlowState(hook=verify)},
)
