"""Servicing (``service``): run the operator's steps on an active node, then back to active.

Out-of-band steps (BIOS settings, firmware through the BMC) run while the
instance keeps running. When a requested step is the ramdisk agent's, or
declares that it needs the ramdisk, the agent is booted first as cleaning
boots it (``ramdisk``), and after the last step the node boots its instance
again from its disk. ``disable_ramdisk`` forbids that boot: only steps that
need no ramdisk may then be asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from metalforge import states
from metalforge.conductor import history, step_plans, stepflow
from metalforge.conductor.flows import ramdisk
from metalforge.conductor.flows import request_fields as fields
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import Node
from metalforge.drivers.base import DriverError
from metalforge.drivers.hardware import DriverRegistry, UnknownDriver
from metalforge.errors import bad_request


def _plan(
    drivers: DriverRegistry,
    node: Node,
    requested: Sequence[Mapping[str, Any]],
    *,
    without_ramdisk: bool,
) -> list[step_plans.Step]:
    supported = step_plans.supported_steps(
        drivers, node, stepflow.SERVICE.name, {}, without_ramdisk=without_ramdisk
    )
    plan = step_plans.requested_plan(supported, requested)
    if without_ramdisk:
        step_plans.check_without_ramdisk(plan)
    return plan


def _needs_ramdisk(task: NodeTask) -> bool:
    """Whether a requested step must run in the agent: one no out-of-band interface
    offers (the agent's, known once it runs), or one declared as needing the ramdisk."""
    try:
        _plan(task.ctx.drivers, task.node, task.progress.requested, without_ramdisk=True)
    except (step_plans.StepRequestError, DriverError):
        # Planned again, and refused with the reason if it still fails, with the agent up.
        return True
    return False


def _skip_ramdisk_unless_needed(task: NodeTask) -> None:
    """No requested step needs the agent: the instance keeps running through servicing."""
    progress = task.progress
    if progress.without_ramdisk or progress.ramdisk_prepared or _needs_ramdisk(task):
        return
    task.progress = dataclasses.replace(progress, without_ramdisk=True)
    task.record("service_plan", "no requested step needs the ramdisk; none is booted")


def service(task: NodeTask) -> None:
    """servicing: boot the ramdisk if a step needs it, build the plan once, then run it."""
    if not stepflow.has_plan(task, stepflow.SERVICE):
        stepflow.claim(task, stepflow.SERVICE)
        _skip_ramdisk_unless_needed(task)
        if not ramdisk.ready(task, RAMDISK):
            return
        requested = stepflow.take_requested(task, stepflow.SERVICE)
        try:
            plan = _plan(
                task.ctx.drivers,
                task.node,
                requested,
                without_ramdisk=task.progress.without_ramdisk,
            )
        except (step_plans.StepRequestError, DriverError) as exc:
            stepflow.fail(task, stepflow.SERVICE, f"Servicing refused: {exc}")
            return
        stepflow.store_plan(task, stepflow.SERVICE, plan)
    stepflow.run(task, stepflow.SERVICE, _finish)


def service_wait(task: NodeTask) -> None:
    if not stepflow.has_plan(task, stepflow.SERVICE):
        ramdisk.check_ready(task, RAMDISK)
        return
    stepflow.poll(task, stepflow.SERVICE, _timeout(task), _finish, _back_to_the_instance)


def _finish(task: NodeTask) -> None:
    ramdisk.finish(task, RAMDISK)


def _timeout(task: NodeTask) -> float:
    return SPEC.timeout(task.ctx.settings)


def _check_requested_steps(admission: Admission) -> None:
    """Refuse now what can be judged of the requested steps (an agent's are judged by
    the conductor once it has reported them)."""
    request = admission.request
    try:
        step_plans.check_requested(
            admission.drivers,
            admission.node,
            stepflow.SERVICE.name,
            {},
            request.steps_for(fields.SERVICE_STEPS),
            without_ramdisk=request.disable_ramdisk,
        )
    except (step_plans.StepRequestError, UnknownDriver, DriverError) as exc:
        raise bad_request(f"Servicing refused: {exc}") from None


def _intent(admission: Admission) -> Intent:
    request = admission.request
    return Intent(
        progress=FlowProgress.starting(
            stepflow.SERVICE.name,
            request.steps_for(fields.SERVICE_STEPS),
            without_ramdisk=request.disable_ramdisk,
        )
    )


def _back_to_the_instance(task: NodeTask) -> None:
    """An aborted servicing (or ``abort`` in ``service failed``) ends in ``active``: a
    ramdisk booted for it is stopped and the instance booted again, as Ironic's abort
    does. If that fails the node stays in ``service failed`` with the reason."""
    progress = task.progress
    booted = progress.flow == stepflow.SERVICE.name and (
        progress.ramdisk_prepared or progress.ramdisk_booting_since is not None
    )
    if booted:
        try:
            ramdisk.tear_down(task, RAMDISK)
        except DriverError as exc:
            message = f"Servicing aborted, but the node could not boot its instance: {exc}"
            task.record("service_abort", message, history.ERROR)
            task.node.last_error = message
            task.save()
            return
    last_error = task.node.last_error
    stepflow.clear_plan(task, stepflow.SERVICE)
    message = "Servicing aborted by the operator; the node is active"
    task.transition(states.ABORT, note=message, last_error=last_error or message)


RAMDISK = ramdisk.RamdiskBoot(
    kind=stepflow.SERVICE,
    purpose="servicing",
    prepare=lambda deploy, task: deploy.prepare_service(task),
    check=lambda deploy, task: deploy.check_service_prepared(task),
    tear_down=lambda deploy, task: deploy.tear_down_service(task),
    timeout=_timeout,
)

SPEC = FlowSpec(
    name="service",
    verbs=(
        Verb(
            states.SERVICE,
            since=(1, 87),
            fields=frozenset({fields.SERVICE_STEPS, fields.DISABLE_RAMDISK, fields.RUNBOOK}),
            requires=fields.SERVICE_STEPS,
            checks=(_check_requested_steps,),
            intent=_intent,
        ),
    ),
    states={
        states.SERVICING: FlowState(hook=service, agent_may_look_up=True),
        states.SERVICE_WAIT: FlowState(
            hook=service_wait,
            agent_may_look_up=True,
            agent_continues=True,
            power_changes_allowed=True,
        ),
        states.SERVICE_HOLD: FlowState(power_changes_allowed=True),
    },
    step_flow=stepflow.SERVICE,
    timeout_setting="clean_callback_timeout",
    failure_state=states.SERVICE_FAILED,
    after_abort=_back_to_the_instance,
)
