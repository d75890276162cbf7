"""Rescue (``rescue``, ``unrescue``): boot a rescue system on a deployed node, and back."""

from __future__ import annotations

from metalforge import states
from metalforge.conductor.bmc_retry import retried
from metalforge.conductor.flows import request_fields as fields
from metalforge.conductor.flows.common import fail
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.drivers.base import DriverError, RescueInterface
from metalforge.errors import bad_request


def _rescue_interface(task: NodeTask) -> RescueInterface:
    return task.ctx.drivers.interface_of(task.node, RescueInterface, "rescue a node")


def rescue(task: NodeTask) -> None:
    """rescuing: boot the rescue system (the request check made sure the interface can)."""
    try:
        iface = _rescue_interface(task)
        outcome = retried(task, "boot the rescue system", lambda: iface.rescue(task))
    except DriverError as exc:
        fail(task, f"Failed to rescue the node: {exc}")
        return
    if outcome == "wait":
        task.transition(states.WAIT, note="waiting for the rescue system")
        return
    task.record("rescue", "the node runs its rescue system")
    task.transition(states.DONE, last_error=None)


def unrescue(task: NodeTask) -> None:
    """unrescuing: back to the instance."""
    try:
        iface = _rescue_interface(task)
        retried(task, "boot the instance again", lambda: iface.unrescue(task))
    except DriverError as exc:
        fail(task, f"Failed to unrescue the node: {exc}")
        return
    task.record("rescue", "the node is back on its instance")
    task.transition(states.DONE, last_error=None)


def _supported(admission: Admission) -> None:
    """Rescue needs a rescue interface that can do it: ``no-rescue`` is refused here."""
    node = admission.node
    iface = admission.drivers.interface(node, "rescue")
    if not isinstance(iface, RescueInterface):
        raise bad_request(
            f"Node {node.uuid} cannot be rescued: its rescue interface is {iface.name!r}. "
            "Set rescue_interface to one that supports rescue (fake-hardware: 'fake')."
        )


def _intent(admission: Admission) -> Intent:
    password = admission.request.rescue_password
    return Intent(
        changes={"instance_info": {**admission.node.instance_info, "rescue_password": password}}
    )


SPEC = FlowSpec(
    name="rescue",
    verbs=(
        Verb(
            states.RESCUE_VERB,
            since=(1, 38),
            fields=frozenset({fields.RESCUE_PASSWORD}),
            requires=fields.RESCUE_PASSWORD,
            checks=(_supported,),
            intent=_intent,
            clears_last_error=False,
        ),
        Verb(states.UNRESCUE, since=(1, 38), checks=(_supported,), clears_last_error=False),
    ),
    states={
        states.RESCUING: FlowState(hook=rescue, agent_may_look_up=True),
        states.RESCUE_WAIT: FlowState(agent_may_look_up=True, power_changes_allowed=True),
        states.UNRESCUING: FlowState(hook=unrescue),
    },
)
