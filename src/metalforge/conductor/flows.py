"""Provision flows, level-triggered: the node's state says what to do next.

A ``provision`` work item carries no instructions; the handler looks at the
node it locked and continues whatever flow that state belongs to. Running it
twice, or after another conductor crashed half-way, is therefore safe.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from metalforge import states
from metalforge.conductor import allocations, deploy_plan, history, stepflow, steps
from metalforge.conductor.task import NodeTask
from metalforge.db.models import utcnow
from metalforge.drivers.base import (
    POWER_OFF,
    DeployInterface,
    DriverError,
    InspectInterface,
    PowerInterface,
    RescueInterface,
    StepsNotKnown,
)

Handler = Callable[[NodeTask], None]


def _power(task: NodeTask) -> PowerInterface:
    iface = task.ctx.drivers.interface(task.node, "power")
    assert isinstance(iface, PowerInterface)
    return iface


def verify(task: NodeTask) -> None:
    """enroll -> verifying: check the BMC answers with the credentials given."""
    try:
        power = _power(task)
        power.validate(task)
        task.node.power_state = power.get_power_state(task)
    except DriverError as exc:
        task.transition(
            states.FAIL,
            note=str(exc),
            severity=history.ERROR,
            last_error=f"Failed to verify node: {exc}",
        )
        return
    task.transition(states.DONE, last_error=None)


def _automated_clean_enabled(task: NodeTask) -> bool:
    node_setting = task.node.automated_clean
    return task.ctx.settings.automated_clean if node_setting is None else node_setting


def _deploy_interface(task: NodeTask) -> DeployInterface:
    iface = task.ctx.drivers.interface(task.node, "deploy")
    if not isinstance(iface, DeployInterface):
        raise DriverError(f"the {iface.name} deploy interface cannot clean or deploy")
    return iface


def _prepare_cleaning(task: NodeTask) -> bool:
    """Boot what cleaning needs (the agent ramdisk) once per flow; ``True`` when ready.

    With ``disable_ramdisk`` (manual cleaning of out-of-band steps only)
    nothing boots. When the ramdisk must boot first, the node waits in
    ``clean wait`` and ``clean_wait`` comes back here once it is up.
    """
    info = task.node.driver_internal_info
    if info.get("clean_prepared") or info.get("clean_disable_ramdisk"):
        return True
    try:
        outcome = _deploy_interface(task).prepare_cleaning(task)
    except DriverError as exc:
        stepflow.fail(task, "clean", f"Failed to prepare the node for cleaning: {exc}")
        return False
    if outcome == "done":
        task.node.driver_internal_info = {**task.node.driver_internal_info, "clean_prepared": True}
        return True
    task.node.driver_internal_info = {
        **task.node.driver_internal_info,
        "clean_preparing_since": task.now(),
    }
    stepflow.schedule_poll(task, task.ctx.settings.async_poll_interval)
    task.transition(states.WAIT, note="waiting for the ramdisk agent to come up")
    return False


def _check_cleaning_prepared(task: NodeTask) -> None:
    """clean wait before any plan exists: is the ramdisk agent up yet?"""
    info = task.node.driver_internal_info
    try:
        outcome = _deploy_interface(task).check_cleaning_prepared(task)
    except DriverError as exc:
        stepflow.fail(task, "clean", f"Failed to prepare the node for cleaning: {exc}")
        return
    if outcome == "wait":
        since = float(info.get("clean_preparing_since", task.now()))
        timeout = task.ctx.settings.clean_callback_timeout
        if task.now() - since > timeout:
            booted = dt.datetime.fromtimestamp(since, dt.UTC).isoformat(timespec="seconds")
            stepflow.fail(
                task,
                "clean",
                f"the ramdisk agent did not come up within {timeout:.0f}s of booting the node "
                f"(at {booted}): no heartbeat",
            )
            return
        stepflow.schedule_poll(task, task.ctx.settings.async_poll_interval)
        return
    info = dict(task.node.driver_internal_info)  # the interface may have changed it
    info.pop("clean_preparing_since", None)
    info["clean_prepared"] = True
    task.node.driver_internal_info = info
    task.transition(states.RESUME, note="the ramdisk agent is up")


def _finish_cleaning(task: NodeTask) -> None:
    if not task.node.driver_internal_info.get("clean_prepared"):
        return  # nothing was booted (automated cleaning off, or disable_ramdisk)
    _deploy_interface(task).tear_down_cleaning(task)


def _warn_unknown_overrides(
    task: NodeTask, kind: str, overrides: dict[str, int], supported: list[steps.Step]
) -> None:
    """Say in the node's history when a priority override names a step the node lacks.

    Start-up cannot check the names: an agent's steps are known only once it
    runs on the node. A typo would otherwise leave a step at its default
    priority without a trace.
    """
    known = {s.name for s in supported}
    unknown = sorted(name for name in overrides if name not in known)
    if unknown:
        task.record(
            f"{kind}_plan",
            f"conductor.{kind}_step_priority_override names step(s) this node does not "
            f"offer, ignored: {', '.join(unknown)}",
            history.WARNING,
        )


def clean(task: NodeTask) -> None:
    """cleaning: boot the ramdisk if needed, build the plan once, then run it."""
    if not stepflow.has_plan(task, "clean"):
        manual = task.node.target_provision_state == states.MANAGEABLE
        if not manual and not _automated_clean_enabled(task):
            task.record("clean_plan", "automated cleaning is disabled; no steps run")
            stepflow.store_plan(task, "clean", [])
            stepflow.run(task, "clean", _finish_cleaning)
            return
        if not _prepare_cleaning(task):
            return
        overrides = steps.parse_overrides(task.ctx.settings.clean_step_priority_override)
        try:
            supported = steps.supported_steps(task.ctx.drivers, task.node, "clean", overrides)
        except StepsNotKnown as exc:
            # Never plan from a partial list: automated cleaning would skip
            # steps silently. Failing keeps the node out of rotation.
            stepflow.fail(task, "clean", f"Cannot plan cleaning: {exc}")
            return
        _warn_unknown_overrides(task, "clean", overrides, supported)
        info = dict(task.node.driver_internal_info)
        requested = info.pop("requested_clean_steps", None)
        task.node.driver_internal_info = info
        if manual:
            try:
                plan = steps.requested_plan(supported, requested or [])
                if task.node.driver_internal_info.get("clean_disable_ramdisk"):
                    steps.check_without_ramdisk(plan)
            except steps.StepRequestError as exc:
                stepflow.fail(task, "clean", f"Manual cleaning refused: {exc}")
                return
        else:
            plan = steps.automated_plan(supported)
        stepflow.store_plan(task, "clean", plan)
    stepflow.run(task, "clean", _finish_cleaning)


def clean_wait(task: NodeTask) -> None:
    if not stepflow.has_plan(task, "clean"):
        _check_cleaning_prepared(task)
        return
    stepflow.poll(task, "clean", _finish_cleaning)


def deploy(task: NodeTask) -> None:
    """deploying: default steps, the templates of the requested traits, the user's; then run.

    The plan is built once (``deploy_plan``, the function the API's checks
    and previews use) and stored on the node, so a takeover resumes it.
    """
    if not stepflow.has_plan(task, "deploy"):
        info = dict(task.node.driver_internal_info)
        requested = info.pop("requested_deploy_steps", None) or []
        task.node.driver_internal_info = info
        overrides = steps.parse_overrides(task.ctx.settings.deploy_step_priority_override)
        try:
            with task.ctx.db.read() as session:
                plan = deploy_plan.plan_for_node(
                    session, task.ctx.drivers, task.node, overrides, requested
                )
        except steps.StepRequestError as exc:
            stepflow.fail(task, "deploy", f"Deploy refused: {exc}")
            return
        if overrides:
            supported = steps.supported_steps(task.ctx.drivers, task.node, "deploy", overrides)
            _warn_unknown_overrides(task, "deploy", overrides, supported)
        if plan.templates:
            task.record(
                "deploy_templates", f"deploy templates applied: {', '.join(plan.templates)}"
            )
        stepflow.store_plan(task, "deploy", plan.steps)
    stepflow.run(task, "deploy")


def deploy_wait(task: NodeTask) -> None:
    stepflow.poll(task, "deploy")


def tear_down(task: NodeTask) -> None:
    """deleting: remove the instance, then hand over to cleaning."""
    try:
        deploy = task.ctx.drivers.interface(task.node, "deploy")
        if not isinstance(deploy, DeployInterface):
            raise DriverError(f"the {deploy.name} deploy interface cannot tear down")
        deploy.tear_down(task)
    except DriverError as exc:
        task.transition(
            states.FAIL,
            note=str(exc),
            severity=history.ERROR,
            last_error=f"Failed to tear down: {exc}",
        )
        return
    info = dict(task.node.driver_internal_info)
    for key in (
        "deploy_steps",
        "deploy_step_index",
        "clean_steps",
        "clean_step_index",
        "requested_clean_steps",
    ):
        info.pop(key, None)
    allocation_id = task.node.allocation_id
    if allocation_id is not None:
        # The instance is gone, so is the node's allocation: in this very
        # transaction, so no one sees a node without instance but still allocated.
        task.with_next_transition(lambda s: allocations.delete_allocation(s, allocation_id))
    task.transition(
        states.DONE,
        instance_info={},
        instance_uuid=None,
        allocation_id=None,
        deploy_step={},
        driver_internal_info=info,
        last_error=None,
    )


def inspect(task: NodeTask) -> None:
    iface = task.ctx.drivers.interface(task.node, "inspect")
    task.node.inspection_started_at = task.node.inspection_started_at or utcnow()
    try:
        if not isinstance(iface, InspectInterface):
            raise DriverError(f"the {iface.name} inspect interface cannot inspect")
        outcome = iface.inspect_hardware(task)
    except DriverError as exc:
        task.transition(
            states.FAIL,
            note=str(exc),
            severity=history.ERROR,
            last_error=f"Inspection failed: {exc}",
        )
        return
    if outcome == "wait":
        task.transition(states.WAIT)
        return
    task.transition(states.DONE, inspection_finished_at=utcnow(), last_error=None)


def adopt(task: NodeTask) -> None:
    try:
        for family in ("power", "deploy", "management"):
            task.ctx.drivers.interface(task.node, family).validate(task)
    except DriverError as exc:
        task.transition(
            states.FAIL, note=str(exc), severity=history.ERROR, last_error=f"Adoption failed: {exc}"
        )
        return
    task.transition(states.DONE, last_error=None)


def _rescue_interface(task: NodeTask) -> RescueInterface:
    iface = task.ctx.drivers.interface(task.node, "rescue")
    if not isinstance(iface, RescueInterface):
        raise DriverError(f"the rescue interface {iface.name!r} cannot rescue a node")
    return iface


def _fail(task: NodeTask, message: str) -> None:
    """The flow's ``fail`` transition, with ``message`` in history and ``last_error``."""
    task.transition(states.FAIL, note=message, severity=history.ERROR, last_error=message)


def rescue(task: NodeTask) -> None:
    """rescuing: boot the rescue system (the API checked the interface can)."""
    try:
        outcome = _rescue_interface(task).rescue(task)
    except DriverError as exc:
        _fail(task, f"Failed to rescue the node: {exc}")
        return
    if outcome == "wait":
        task.transition(states.WAIT, note="waiting for the rescue system")
        return
    task.record("rescue", "the node runs its rescue system")
    task.transition(states.DONE, last_error=None)


def unrescue(task: NodeTask) -> None:
    """unrescuing: back to the instance."""
    try:
        _rescue_interface(task).unrescue(task)
    except DriverError as exc:
        _fail(task, f"Failed to unrescue the node: {exc}")
        return
    task.record("rescue", "the node is back on its instance")
    task.transition(states.DONE, last_error=None)


def service(task: NodeTask) -> None:
    """servicing: run the operator's steps on an active node."""
    if not stepflow.has_plan(task, "service"):
        info = dict(task.node.driver_internal_info)
        requested = info.pop("requested_service_steps", None) or []
        task.node.driver_internal_info = info
        try:
            supported = steps.supported_steps(task.ctx.drivers, task.node, "clean", {})
            plan = steps.requested_plan(supported, requested)
            if _deploy_interface(task).boots_ramdisk:
                # Servicing does not boot the agent yet: only out-of-band steps can run.
                steps.check_without_ramdisk(plan)
        except (steps.StepRequestError, DriverError) as exc:
            stepflow.fail(task, "service", f"Servicing refused: {exc}")
            return
        stepflow.store_plan(task, "service", plan)
    stepflow.run(task, "service")


def service_wait(task: NodeTask) -> None:
    stepflow.poll(task, "service")


HANDLERS: dict[str, Handler] = {
    states.VERIFYING: verify,
    states.CLEANING: clean,
    states.CLEAN_WAIT: clean_wait,
    states.DEPLOYING: deploy,
    states.DEPLOY_WAIT: deploy_wait,
    states.DELETING: tear_down,
    states.INSPECTING: inspect,
    states.ADOPTING: adopt,
    states.RESCUING: rescue,
    states.UNRESCUING: unrescue,
    states.SERVICING: service,
    states.SERVICE_WAIT: service_wait,
}
"""States in which a conductor has work to do; other states wait for someone else."""

STEP_FLOW_OF_STATE: dict[str, stepflow.FlowKind] = {
    states.CLEANING: "clean",
    states.CLEAN_WAIT: "clean",
    states.DEPLOYING: "deploy",
    states.DEPLOY_WAIT: "deploy",
    states.SERVICING: "service",
    states.SERVICE_WAIT: "service",
}
"""The states of the flows that run a plan of steps (``stepflow``)."""

FLOW_OF_WAIT_STATE: dict[str, stepflow.FlowKind] = {
    state: kind for state, kind in STEP_FLOW_OF_STATE.items() if state in states.WAIT_STATES
}


def fail_flow(task: NodeTask, message: str) -> None:
    """End the node's flow in its failure state, whatever stopped it.

    Used for what no step reported: an unexpected error in metalforge or a
    driver, or a work item given up on. A step flow fails as a failed step
    does (cleaning puts the node in maintenance, the step is cleared, the
    agent's token is voided); another flow takes its ``fail`` transition; a
    node at rest keeps its state and gets ``last_error``.
    """
    task.node.target_power_state = None
    kind = STEP_FLOW_OF_STATE.get(task.node.provision_state)
    if kind is not None:
        stepflow.fail(task, kind, message)
    elif states.FAIL in states.allowed_events(task.node.provision_state):
        _fail(task, message)
    else:
        task.record("error", message, history.ERROR)
        task.node.last_error = message


def advance(task: NodeTask) -> None:
    """Continue the node's flow from its current state until it rests or waits."""
    seen = 0
    while seen < 8:
        before = (task.node.provision_state, task.node.epoch)
        handler = HANDLERS.get(task.node.provision_state)
        if handler is None:
            return
        handler(task)
        if (task.node.provision_state, task.node.epoch) == before:
            return
        if task.node.provision_state in states.WAIT_STATES:
            return
        seen += 1


def abort(task: NodeTask) -> None:
    """The operator's ``abort``: stop a waiting flow now, or after a non-abortable step."""
    state = task.node.provision_state
    kind = FLOW_OF_WAIT_STATE.get(state)
    if kind is not None:
        step = stepflow.current_step(task, kind)
        if step is not None and not step.abortable:
            current = dict(getattr(task.node, f"{kind}_step") or {})
            current["abort_after"] = True
            setattr(task.node, f"{kind}_step", current)
            task.record(
                f"{kind}_abort",
                f"abort requested; {step.name} is not abortable and will finish first",
            )
            task.save()
            return
        if (
            step is None
            and kind == "clean"
            and task.node.driver_internal_info.get("clean_preparing_since")
        ):
            # Aborted while the ramdisk boots: nothing runs on it yet, stop it.
            try:
                _deploy_interface(task).tear_down_cleaning(task)
            except DriverError as exc:
                task.record("clean_abort", f"could not stop the ramdisk: {exc}", history.WARNING)
        stepflow.abort(task, kind, step)
        return
    if states.ABORT in states.allowed_events(state):
        message = f"Aborted by the operator in state {state}"
        task.transition(states.ABORT, note=message, last_error=message)


def set_power(task: NodeTask, target: str, timeout: int | None) -> None:
    """Change the power state and record what the hardware reports afterwards."""
    power = _power(task)
    try:
        power.set_power_state(task, target, timeout)
        task.node.power_state = power.get_power_state(task)
        task.node.last_error = None
        task.record("power", f"power state set to {task.node.power_state} ({target})")
    except DriverError as exc:
        task.node.last_error = f"Failed to change power state to {target!r}: {exc}"
        task.record("power", task.node.last_error, history.ERROR)
    task.node.target_power_state = None


def power_off_quietly(task: NodeTask) -> None:
    try:
        _power(task).set_power_state(task, POWER_OFF)
        task.node.power_state = POWER_OFF
    except DriverError as exc:
        task.record("power", f"could not power off: {exc}", history.WARNING)
