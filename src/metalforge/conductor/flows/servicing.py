"""Servicing (``service``): run the operator's steps on an active node, then back to active."""

from __future__ import annotations

from metalforge import states
from metalforge.conductor import step_plans, stepflow
from metalforge.conductor.flows import request_fields as fields
from metalforge.conductor.flows.common import deploy_interface
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.db.flow_progress import FlowProgress
from metalforge.drivers.base import DriverError


def service(task: NodeTask) -> None:
    """servicing: build the plan from the requested steps once, then run it."""
    if not stepflow.has_plan(task, stepflow.SERVICE):
        requested = stepflow.take_requested(task, stepflow.SERVICE)
        try:
            supported = step_plans.supported_steps(
                task.ctx.drivers, task.node, stepflow.SERVICE.catalogue, {}
            )
            plan = step_plans.requested_plan(supported, requested)
            if deploy_interface(task).boots_ramdisk:
                # Servicing does not boot the agent yet: only out-of-band steps can run.
                step_plans.check_without_ramdisk(plan)
        except (step_plans.StepRequestError, DriverError) as exc:
            stepflow.fail(task, stepflow.SERVICE, f"Servicing refused: {exc}")
            return
        stepflow.store_plan(task, stepflow.SERVICE, plan)
    stepflow.run(task, stepflow.SERVICE)


def service_wait(task: NodeTask) -> None:
    stepflow.poll(task, stepflow.SERVICE, SPEC.timeout(task.ctx.settings))


def _intent(admission: Admission) -> Intent:
    return Intent(
        progress=FlowProgress.starting(stepflow.SERVICE.name, admission.request.service_steps)
    )


SPEC = FlowSpec(
    name="service",
    verbs=(
        Verb(
            states.SERVICE,
            since=(1, 87),
            fields=frozenset({fields.SERVICE_STEPS, fields.DISABLE_RAMDISK}),
            requires=fields.SERVICE_STEPS,
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
)
