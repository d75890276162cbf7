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
    _read_from_bmc(task, "bios", "BIOS settings")
    _read_from_bmc(task, "firmware", "firmware versions")
    task.transition(states.DONE, last_error=None)


def _read_from_bmc(task: NodeTask, family: str, what: str) -> None:
    """Read the BIOS settings (or firmware versions) once the BMC is known to answer, so
    the API shows them from the start; a BMC that cannot report them does not fail
    verification (the node's history says so), and no-bios/no-firmware read nothing."""
    iface = task.ctx.drivers.interface(task.node, family)
    try:
        if isinstance(iface, BiosInterface):
            iface.cache_bios_settings(task)
        elif isinstance(iface, FirmwareInterface):
            iface.cache_firmware_components(task)
    except DriverError as exc:
        task.record(family, f"{what} could not be read: {exc}", history.WARNING)


SPEC = FlowSpec(
    name="verify",
    verbs=(Verb(states.MANAGE, since=(1, 4), intent=forget_progress),),
    states={states.VERIFYING: FlowState(hook=verify)},
)
