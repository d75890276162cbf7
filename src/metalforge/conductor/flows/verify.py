"""Verification (``manage`` from ``enroll``): check the BMC answers with its credentials."""

from __future__ import annotations

from metalforge import states
from metalforge.conductor.bmc_retry import retried
from metalforge.conductor.flows.common import fail, forget_progress, power, read_from_bmc
from metalforge.conductor.flows.spec import FlowSpec, FlowState, Verb
from metalforge.conductor.task import NodeTask
from metalforge.drivers.base import DriverError


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
    read_from_bmc(task, "bios")
    read_from_bmc(task, "firmware")
    task.transition(states.DONE, last_error=None)


SPEC = FlowSpec(
    name="verify",
    verbs=(Verb(states.MANAGE, since=(1, 4), intent=forget_progress),),
    states={states.VERIFYING: FlowState(hook=verify)},
)
