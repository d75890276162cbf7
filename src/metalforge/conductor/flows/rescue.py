"""Rescue (``rescue``, ``unrescue``): boot a rescue system on a deployed node, and back."""

from __future__ import annotations

from metalforge import states
from metalforge.conductor import stepflow
from metalforge.conductor.bmc_retry import retried
from metalforge.conductor.flows import request_fields as fields
from metalforge.conductor.flows.common import fail
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.drivers.base import DriverError, NotOffered, RescueInterface
from metalforge.errors import bad_request


def _rescue_interface(task: NodeTask) -> RescueInterface:
    return task.ctx.drivers.interface_of(task.node, RescueInterface, "rescue a node")


def rescue(task: NodeTask) -> None:
    """rescuing: boot the rescue system (the request check made sure the interface can)."""
    try:
        iface = _rescue_interface(task)
        outcome = retried(task, "boot the rescue system", lambda: iface.rescue(task))
    except DriverError as exc:
        _clean_up(task, f"Failed to rescue the node: {exc}")
        fail(task, f"Failed to rescue the node: {exc}")
        return
    if outcome == "wait":
        # Checked again soon (and at each heartbeat), so that the timeout is noticed.
        stepflow.schedule_poll(task, task.ctx.settings.async_poll_interval)
        task.transition(states.WAIT, note="waiting for the rescue system")
        return
    task.record("rescue", "the node runs its rescue system")
    task.transition(states.DONE, last_error=None)


def rescue_wait(task: NodeTask) -> None:
    """rescue wait: done once the rescue system is up; failed after
    ``conductor.rescue_callback_timeout`` seconds of booting."""
    try:
        iface = _rescue_interface(task)
        outcome = iface.check_rescued(task)
    except DriverError as exc:
        _clean_up(task, f"Failed to rescue the node: {exc}")
        fail(task, f"Failed to rescue the node: {exc}")
        return
    if outcome == "done":
        task.record("rescue", "the node runs its rescue system")
        task.transition(states.DONE, last_error=None)
        return
    timeout = SPEC.timeout(task.ctx.settings)
    session = task.agent_session()
    booted = session.booted_at if session is not None else None
    waited = (task.ctx.db.now() - booted).total_seconds() if booted is not None else 0.0
    if booted is None or waited > timeout:
        message = (
            f"Timed out after {timeout:.0f}s waiting for the rescue system to come up"
            if booted is not None
            else "The rescue system's boot was lost (its agent session ended)"
        )
        _clean_up(task, message)
        fail(task, message)
        return
    stepflow.schedule_poll(task, task.ctx.settings.async_poll_interval)


def _clean_up(task: NodeTask, why: str) -> None:
    """Stop what the rescue booted; what fails here is recorded beside ``why``."""
    try:
        _rescue_interface(task).clean_up(task)
    except DriverError as exc:
        task.record("rescue", f"cleaning up after a failed rescue ({why}) failed: {exc}")


def _on_abort(task: NodeTask) -> None:
    _clean_up(task, "aborted")


def _on_fail(task: NodeTask, message: str) -> None:
    _clean_up(task, message)


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
    try:
        iface = admission.drivers.interface_of(node, RescueInterface, "rescue")
    except NotOffered as exc:
        raise bad_request(
            f"Node {node.uuid} cannot be rescued: its rescue interface is "
            f"{exc.implementation!r}. Set rescue_interface to one that supports rescue "
            "('agent'; fake-hardware: 'fake')."
        ) from None
    password = admission.request.rescue_password
    if password is not None:
        try:
            iface.check_password(password)
        except DriverError as exc:
            raise bad_request(str(exc)) from None


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
        states.RESCUE_WAIT: FlowState(
            hook=rescue_wait,
            agent_may_look_up=True,
            agent_continues=True,
            power_changes_allowed=True,
        ),
        states.UNRESCUING: FlowState(hook=unrescue),
    },
    timeout_setting="rescue_callback_timeout",
    on_abort=_on_abort,
    on_fail=_on_fail,
)
