"""Cleaning: automated (``provide``) and manual (``clean`` with the operator's steps).

The ramdisk is booted once per flow (``ramdisk.ready``), the plan is built from
the steps the node offers (an agent's only once it reports), run by
``stepflow``, and the ramdisk stopped after the last step.
"""

from __future__ import annotations

import dataclasses

from metalforge import states
from metalforge.conductor import step_plans, stepflow
from metalforge.conductor.flows import ramdisk
from metalforge.conductor.flows import request_fields as fields
from metalforge.conductor.flows.common import warn_unknown_overrides
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.db.flow_progress import FlowProgress
from metalforge.drivers.base import DriverError, StepsNotKnown
from metalforge.drivers.hardware import UnknownDriver
from metalforge.errors import bad_request


def _automated_clean_enabled(task: NodeTask) -> bool:
    node_setting = task.node.automated_clean
    return task.ctx.settings.automated_clean if node_setting is None else node_setting


def _finish(task: NodeTask) -> None:
    ramdisk.finish(task, RAMDISK)


def _timeout(task: NodeTask) -> float:
    return SPEC.timeout(task.ctx.settings)


def _plan(task: NodeTask, manual: bool) -> list[step_plans.Step] | None:
    """The steps this flow runs, or ``None`` once the flow was failed."""
    overrides = task.ctx.settings.clean_step_priority_override
    try:
        supported = step_plans.supported_steps(
            task.ctx.drivers,
            task.node,
            stepflow.CLEAN.name,
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


def _needs_ramdisk(task: NodeTask) -> bool:
    """Whether a requested manual clean step must run in the agent: one no out-of-band
    interface offers (the agent's, known once it runs), or one declared as needing it."""
    try:
        supported = step_plans.supported_steps(
            task.ctx.drivers,
            task.node,
            stepflow.CLEAN.name,
            task.ctx.settings.clean_step_priority_override,
            without_ramdisk=True,
        )
        plan = step_plans.requested_plan(supported, list(task.progress.requested))
        step_plans.check_without_ramdisk(plan)
    except (step_plans.StepRequestError, StepsNotKnown, DriverError):
        # Planned again with the agent up, and refused with the reason if it still fails.
        return True
    return False


def _skip_ramdisk_unless_needed(task: NodeTask) -> None:
    """A manual clean of out-of-band steps only boots nothing (as ``disable_ramdisk``)."""
    progress = task.progress
    if progress.without_ramdisk or progress.ramdisk_prepared or _needs_ramdisk(task):
        return
    task.progress = dataclasses.replace(progress, without_ramdisk=True)
    task.record("clean_plan", "no requested step needs the ramdisk; none is booted")


def clean(task: NodeTask) -> None:
    """cleaning: boot the ramdisk if needed, build the plan once, then run it."""
    if not stepflow.has_plan(task, stepflow.CLEAN):
        stepflow.claim(task, stepflow.CLEAN)
        manual = task.node.target_provision_state == states.MANAGEABLE
        if manual:
            _skip_ramdisk_unless_needed(task)
        if not manual and not _automated_clean_enabled(task):
            task.record("clean_plan", "automated cleaning is disabled; no steps run")
            stepflow.store_plan(task, stepflow.CLEAN, [])
            stepflow.run(task, stepflow.CLEAN, _finish)
            return
        if not ramdisk.ready(task, RAMDISK):
            return
        plan = _plan(task, manual)
        if plan is None:
            return
        stepflow.store_plan(task, stepflow.CLEAN, plan)
    stepflow.run(task, stepflow.CLEAN, _finish)


def clean_wait(task: NodeTask) -> None:
    if not stepflow.has_plan(task, stepflow.CLEAN):
        ramdisk.check_ready(task, RAMDISK)
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
            stepflow.CLEAN.name,
            request.steps_for(fields.CLEAN_STEPS),
            without_ramdisk=request.disable_ramdisk,
        )
    )


def _check_requested_steps(admission: Admission) -> None:
    """Refuse now what can be judged of the requested steps (an agent's are judged by
    the conductor once it has reported them; so is ``disable_ramdisk``, as Ironic's
    conductor judges it: the clean fails)."""
    request = admission.request
    try:
        step_plans.check_requested(
            admission.drivers,
            admission.node,
            stepflow.CLEAN.name,
            admission.settings.clean_step_priority_override,
            request.steps_for(fields.CLEAN_STEPS),
        )
    except (step_plans.StepRequestError, UnknownDriver) as exc:
        raise bad_request(f"Manual cleaning refused: {exc}") from None


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


RAMDISK = ramdisk.RamdiskBoot(
    kind=stepflow.CLEAN,
    purpose="cleaning",
    prepare=lambda deploy, task: deploy.prepare_cleaning(task),
    check=lambda deploy, task: deploy.check_cleaning_prepared(task),
    tear_down=lambda deploy, task: deploy.tear_down_cleaning(task),
    end=lambda deploy, task: deploy.finish_cleaning(task),
    timeout=_timeout,
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
    on_abort=lambda task: ramdisk.stop_while_booting(task, RAMDISK),
)
