"""Cleaning: automated (``provide``) and manual (``clean`` with the operator's steps).

The ramdisk is booted once per flow (``prepare``), the plan is built from the
steps the node offers (an agent's only once it reports), run by ``stepflow``,
and the ramdisk stopped after the last step.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from metalforge import states
from metalforge.conductor import history, step_plans, stepflow
from metalforge.conductor.bmc_retry import retried
from metalforge.conductor.flows import request_fields as fields
from metalforge.conductor.flows.common import deploy_interface, warn_unknown_overrides
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.db.flow_progress import FlowProgress
from metalforge.drivers.base import DriverError, StepsNotKnown
from metalforge.drivers.hardware import UnknownDriver
from metalforge.errors import bad_request


def _automated_clean_enabled(task: NodeTask) -> bool:
    node_setting = task.node.automated_clean
    return task.ctx.settings.automated_clean if node_setting is None else node_setting


def _prepare(task: NodeTask) -> bool:
    """Boot what cleaning needs (the agent ramdisk) once per flow; ``True`` when ready.

    With ``disable_ramdisk`` (manual cleaning of out-of-band steps only)
    nothing boots. When the ramdisk must boot first, the node waits in
    ``clean wait`` and ``clean_wait`` comes back here once it is up.
    """
    progress = task.progress
    if progress.ramdisk_prepared or progress.without_ramdisk:
        return True
    try:
        iface = deploy_interface(task)
        outcome = retried(task, "boot for cleaning", lambda: iface.prepare_cleaning(task))
    except DriverError as exc:
        stepflow.fail(task, stepflow.CLEAN, f"Failed to prepare the node for cleaning: {exc}")
        return False
    if outcome == "done":
        task.progress = dataclasses.replace(task.progress, ramdisk_prepared=True)
        return True
    task.progress = dataclasses.replace(task.progress, ramdisk_booting_since=task.now())
    stepflow.schedule_poll(task, task.ctx.settings.async_poll_interval)
    task.transition(states.WAIT, note="waiting for the ramdisk agent to come up")
    return False


def _check_prepared(task: NodeTask) -> None:
    """clean wait before any plan exists: is the ramdisk agent up yet?"""
    try:
        outcome = deploy_interface(task).check_cleaning_prepared(task)
    except DriverError as exc:
        stepflow.fail(task, stepflow.CLEAN, f"Failed to prepare the node for cleaning: {exc}")
        return
    if outcome == "wait":
        since = task.progress.ramdisk_booting_since
        if since is None:
            since = task.now()
        timeout = SPEC.timeout(task.ctx.settings)
        if task.now() - since > timeout:
            booted = dt.datetime.fromtimestamp(since, dt.UTC).isoformat(timespec="seconds")
            stepflow.fail(
                task,
                stepflow.CLEAN,
                f"the ramdisk agent did not come up within {timeout:.0f}s of booting the node "
                f"(at {booted}): no heartbeat",
            )
            return
        stepflow.schedule_poll(task, task.ctx.settings.async_poll_interval)
        return
    task.progress = dataclasses.replace(
        task.progress, ramdisk_booting_since=None, ramdisk_prepared=True
    )
    task.transition(states.RESUME, note="the ramdisk agent is up")


def _tear_down_ramdisk(task: NodeTask) -> None:
    """Stop the ramdisk cleaning booted (after the last step, or on abort while it boots)."""
    deploy_interface(task).tear_down_cleaning(task)


def _abort_while_booting(task: NodeTask) -> None:
    """Aborted before any step: a ramdisk still booting runs nothing yet, so stop it."""
    if task.progress.ramdisk_booting_since is None:
        return
    try:
        _tear_down_ramdisk(task)
    except DriverError as exc:
        task.record("clean_abort", f"could not stop the ramdisk: {exc}", history.WARNING)


def _finish(task: NodeTask) -> None:
    if not task.progress.ramdisk_prepared:
        return  # nothing was booted (automated cleaning off, or disable_ramdisk)
    _tear_down_ramdisk(task)


def _plan(task: NodeTask, manual: bool) -> list[step_plans.Step] | None:
    """The steps this flow runs, or ``None`` once the flow was failed."""
    overrides = task.ctx.settings.clean_step_priority_override
    try:
        supported = step_plans.supported_steps(
            task.ctx.drivers,
            task.node,
            stepflow.CLEAN.catalogue,
            overrides,
            without_ramdisk=manual and task.progress.without_ramdisk,
        )
    except StepsNotKnown as exc:
        # Never plan from a partial list: automated cleaning would skip
        # steps silently. Failing keeps the node out of rotation.
        stepflow.fail(task, stepflow.CLEAN, f"Cannot plan cleaning: {exc}")
        return None
    warn_unknown_overrides(task, stepflow.CLEAN.name, overrides, supported)
    requested = stepflow.take_requested(task, stepflow.CLEAN)
    if not manual:
        return step_plans.automated_plan(supported)
    try:
        plan = step_plans.requested_plan(supported, requested)
        if task.progress.without_ramdisk:
            step_plans.check_without_ramdisk(plan)
    except step_plans.StepRequestError as exc:
        stepflow.fail(task, stepflow.CLEAN, f"Manual cleaning refused: {exc}")
        return None
    return plan


def clean(task: NodeTask) -> None:
    """cleaning: boot the ramdisk if needed, build the plan once, then run it."""
    if not stepflow.has_plan(task, stepflow.CLEAN):
        stepflow.claim(task, stepflow.CLEAN)
        manual = task.node.target_provision_state == states.MANAGEABLE
        if not manual and not _automated_clean_enabled(task):
            task.record("clean_plan", "automated cleaning is disabled; no steps run")
            stepflow.store_plan(task, stepflow.CLEAN, [])
            stepflow.run(task, stepflow.CLEAN, _finish)
            return
        if not _prepare(task):
            return
        plan = _plan(task, manual)
        if plan is None:
            return
        stepflow.store_plan(task, stepflow.CLEAN, plan)
    stepflow.run(task, stepflow.CLEAN, _finish)


def clean_wait(task: NodeTask) -> None:
    if not stepflow.has_plan(task, stepflow.CLEAN):
        _check_prepared(task)
        return
    stepflow.poll(task, stepflow.CLEAN, SPEC.timeout(task.ctx.settings), _finish)


# -- requests ------------------------------------------------------------------


def forget_cleaning(_admission: Admission) -> Intent:
    """A new cleaning starts without what an earlier flow left on the node."""
    return Intent(progress=FlowProgress.starting(stepflow.CLEAN.name))


def _manual_intent(admission: Admission) -> Intent:
    request = admission.request
    return Intent(
        progress=FlowProgress.starting(
            stepflow.CLEAN.name, request.clean_steps, without_ramdisk=request.disable_ramdisk
        )
    )


def _check_requested_steps(admission: Admission) -> None:
    """Refuse now the steps the node does not offer, when its steps are known yet."""
    settings = admission.settings
    try:
        supported = step_plans.supported_steps(
            admission.drivers,
            admission.node,
            stepflow.CLEAN.catalogue,
            settings.clean_step_priority_override,
        )
        step_plans.requested_plan(supported, list(admission.request.clean_steps))
    except (step_plans.StepRequestError, UnknownDriver) as exc:
        raise bad_request(f"Manual cleaning refused: {exc}") from None
    except StepsNotKnown:
        pass  # the conductor checks the steps again once the interface knows them


def _out_of_maintenance(admission: Admission) -> None:
    """A failed clean leaves the node in maintenance; the operator ends it to clean again."""
    node = admission.node
    retrying = admission.request.verb == states.PROVIDE
    if node.maintenance and (not retrying or node.provision_state == states.CLEAN_FAILED):
        what = "retrying cleaning" if retrying else "manual cleaning"
        raise bad_request(
            f"Node {node.uuid} is in maintenance mode; {what} needs it "
            "turned off first (see maintenance_reason and last_error)."
        )


SPEC = FlowSpec(
    name="clean",
    verbs=(
        Verb(states.PROVIDE, since=(1, 4), checks=(_out_of_maintenance,), intent=forget_cleaning),
        Verb(
            states.CLEAN,
            since=(1, 15),
            fields=frozenset({fields.CLEAN_STEPS, fields.DISABLE_RAMDISK, fields.RUNBOOK}),
            requires=fields.CLEAN_STEPS,
            checks=(_out_of_maintenance, _check_requested_steps),
            intent=_manual_intent,
        ),
    ),
    states={
        states.CLEANING: FlowState(
            hook=clean, agent_may_look_up=True, power_refusal_ignores_lock=True
        ),
        states.CLEAN_WAIT: FlowState(
            hook=clean_wait,
            agent_may_look_up=True,
            agent_continues=True,
            power_refusal_ignores_lock=True,
        ),
        states.CLEAN_HOLD: FlowState(power_changes_allowed=True),
    },
    step_flow=stepflow.CLEAN,
    timeout_setting="clean_callback_timeout",
    on_abort=_abort_while_booting,
)
