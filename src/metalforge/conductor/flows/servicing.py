"""Servicing (``service``): run the operator's steps on an active node, then back to active."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metalforge import states
from metalforge.conductor import step_plans, stepflow
from metalforge.conductor.flows import request_fields as fields
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import Node
from metalforge.drivers.base import DeployInterface, DriverError, StepsNotKnown
from metalforge.drivers.hardware import DriverRegistry, UnknownDriver
from metalforge.errors import bad_request


def _plan(
    drivers: DriverRegistry, node: Node, requested: Sequence[Mapping[str, Any]]
) -> list[step_plans.Step]:
    # Servicing boots no ramdisk yet: the agent's steps (not known without it) cannot run.
    supported = step_plans.supported_steps(
        drivers, node, stepflow.SERVICE.catalogue, {}, without_ramdisk=True
    )
    plan = step_plans.requested_plan(supported, requested)
    deploy = drivers.interface_of(node, DeployInterface, "clean or deploy")
    if deploy.boots_ramdisk:
        # Servicing does not boot the agent yet: only out-of-band steps can run.
        step_plans.check_without_ramdisk(plan)
    return plan


def service(task: NodeTask) -> None:
    """servicing: build the plan from the requested steps once, then run it."""
    if not stepflow.has_plan(task, stepflow.SERVICE):
        requested = stepflow.take_requested(task, stepflow.SERVICE)
        try:
            plan = _plan(task.ctx.drivers, task.node, requested)
        except (step_plans.StepRequestError, DriverError) as exc:
            stepflow.fail(task, stepflow.SERVICE, f"Servicing refused: {exc}")
            return
        stepflow.store_plan(task, stepflow.SERVICE, plan)
    stepflow.run(task, stepflow.SERVICE)


def service_wait(task: NodeTask) -> None:
    stepflow.poll(task, stepflow.SERVICE, SPEC.timeout(task.ctx.settings))


def _check_requested_steps(admission: Admission) -> None:
    """Refuse now the steps the node cannot run, when its steps are known yet."""
    try:
        _plan(admission.drivers, admission.node, admission.request.service_steps)
    except StepsNotKnown:
        pass  # the conductor checks the steps again once the interface knows them
    except (step_plans.StepRequestError, UnknownDriver, DriverError) as exc:
        raise bad_request(f"Servicing refused: {exc}") from None


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
)
