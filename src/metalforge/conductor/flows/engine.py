"""Running a node's flow, level-triggered: the node's state says what to do next.

A ``provision`` work item carries no instructions; the handler looks at the
node it locked and continues whatever flow that state belongs to (its spec's
hook for the state). Running it twice, or after another conductor crashed
half-way, is therefore safe.
"""

from __future__ import annotations

from metalforge import states
from metalforge.conductor import history, stepflow
from metalforge.conductor.bmc_retry import retried
from metalforge.conductor.flows import catalog
from metalforge.conductor.flows.common import fail, power
from metalforge.conductor.task import NodeTask
from metalforge.drivers.base import DriverError, set_info, switch_power


def fail_flow(task: NodeTask, message: str) -> None:
    """End the node's flow in its failure state, whatever stopped it.

    Used for what no step reported: an unexpected error in metalforge or a
    driver, or a work item given up on. A step flow fails as a failed step
    does (cleaning puts the node in maintenance, the step is cleared, the
    agent's token is voided); another flow takes its ``fail`` transition; a
    node at rest keeps its state and gets ``last_error``.
    """
    task.node.target_power_state = None
    spec = catalog.flow_of(task.node.provision_state)
    if spec is not None and spec.on_fail is not None:
        spec.on_fail(task, message)
    kind = catalog.STEP_FLOW_OF_STATE.get(task.node.provision_state)
    if kind is not None:
        stepflow.fail(task, kind, message)
    elif states.FAIL in states.allowed_events(task.node.provision_state):
        fail(task, message)
    else:
        task.record("error", message, history.ERROR)
        task.node.last_error = message


def advance(task: NodeTask) -> None:
    """Continue the node's flow from its current state until it rests or waits."""
    seen = 0
    while seen < 8:
        before = (task.node.provision_state, task.node.epoch)
        hook = catalog.HOOKS.get(task.node.provision_state)
        if hook is None:
            return
        hook(task)
        if (task.node.provision_state, task.node.epoch) == before:
            return
        if task.node.provision_state in states.WAIT_STATES:
            return
        seen += 1


def abort(task: NodeTask) -> None:
    """The operator's ``abort``: stop a waiting flow now, or after a non-abortable step."""
    state = task.node.provision_state
    kind = catalog.STEP_FLOW_OF_STATE.get(state) if state in states.WAIT_STATES else None
    if kind is not None:
        step = stepflow.current_step(task, kind)
        if step is not None and not step.abortable:
            current = kind.shown(task.node)
            current["abort_after"] = True
            kind.show(task.node, current)
            task.record(
                f"{kind.name}_abort",
                f"abort requested; {step.name} is not abortable and will finish first",
            )
            task.save()
            return
        spec = catalog.flow_of(state)
        if step is None and spec is not None and spec.on_abort is not None:
            spec.on_abort(task)
        stepflow.abort(task, kind, step, then=spec.after_abort if spec is not None else None)
        return
    after_abort = catalog.AFTER_ABORT_FROM.get(state)
    if after_abort is not None:
        after_abort(task)
        return
    if states.ABORT in states.allowed_events(state):
        spec = catalog.flow_of(state)
        if spec is not None and spec.step_flow is None and spec.on_abort is not None:
            spec.on_abort(task)
        message = f"Aborted by the operator in state {state}"
        task.transition(states.ABORT, note=message, last_error=message)


def _end_kept_agent(task: NodeTask) -> None:
    """A power change ends the agent a flow kept running (fast track): it is off, or
    rebooting into whatever the node boots now, and no flow may count on it."""
    session = task.agent_session()
    if session is None or session.kept_since is None:
        return
    task.end_agent_session()
    set_info(task, agent_url=None, agent_version=None, agent_last_heartbeat=None)
    task.record("agent", "the agent kept for the next flow was ended by the power change")


def set_power(task: NodeTask, target: str, timeout: int | None) -> None:
    """Change the power state and record what the hardware reports afterwards."""
    iface = power(task)
    try:
        retried(task, f"power {target}", lambda: switch_power(task, iface, target, timeout))
        task.node.power_state = retried(
            task, "read the power state", lambda: iface.get_power_state(task)
        )
        task.node.last_error = None
        task.record("power", f"power state set to {task.node.power_state} ({target})")
        _end_kept_agent(task)
    except DriverError as exc:
        task.node.last_error = f"Failed to change power state to {target!r}: {exc}"
        task.record("power", task.node.last_error, history.ERROR)
    task.node.target_power_state = None
