"""Inspection (``inspect``): collect the hardware inventory through the inspect interface."""

from __future__ import annotations

from metalforge import states
from metalforge.conductor.flows.common import fail
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.db.models import utcnow
from metalforge.drivers.base import DriverError, InspectInterface


def inspect(task: NodeTask) -> None:
    iface = task.ctx.drivers.interface(task.node, "inspect")
    task.node.inspection_started_at = task.node.inspection_started_at or utcnow()
    try:
        if not isinstance(iface, InspectInterface):
            raise DriverError(f"the {iface.name} inspect interface cannot inspect")
        outcome = iface.inspect_hardware(task)
    except DriverError as exc:
        fail(task, f"Inspection failed: {exc}", str(exc))
        return
    if outcome == "wait":
        task.transition(states.WAIT)
        return
    task.transition(states.DONE, inspection_finished_at=utcnow(), last_error=None)


def _intent(_admission: Admission) -> Intent:
    return Intent(changes={"inspection_started_at": utcnow(), "inspection_finished_at": None})


SPEC = FlowSpec(
    name="inspect",
    verbs=(Verb(states.INSPECT, since=(1, 6), intent=_intent),),
    states={
        states.INSPECTING: FlowState(hook=inspect, agent_may_look_up=True),
        states.INSPECT_WAIT: FlowState(
            agent_may_look_up=True, power_changes_allowed=True, abort_since=(1, 41)
        ),
    },
)
