"""Deployment (``active``, ``rebuild``): default steps, the templates of the traits, the user's.

The plan is built once (``deploy_plan``, the function the request check,
node validation and previews use) and stored on the node, so a takeover
resumes it; a plan naming the agent's deploy steps is completed once, when
the agent has reported them (``stepflow.DEPLOY.completes``).
"""

from __future__ import annotations

from metalforge import states
from metalforge.conductor import deploy_plan, step_plans, stepflow
from metalforge.conductor.flows import request_fields as fields
from metalforge.conductor.flows.common import warn_unknown_overrides
from metalforge.conductor.flows.guards import not_in_maintenance, not_protected
from metalforge.conductor.flows.spec import Admission, FlowSpec, FlowState, Intent, Verb
from metalforge.conductor.task import NodeTask
from metalforge.db.flow_progress import FlowProgress
from metalforge.drivers.hardware import UnknownDriver
from metalforge.errors import bad_request


def deploy(task: NodeTask) -> None:
    """deploying: build the plan once, then run it."""
    if not stepflow.has_plan(task, stepflow.DEPLOY):
        requested = stepflow.requested(task, stepflow.DEPLOY)
        overrides = task.ctx.settings.deploy_step_priority_override
        try:
            with task.ctx.db.read() as session:
                plan = deploy_plan.plan_for_node(
                    session, task.ctx.drivers, task.node, overrides, requested
                )
        except step_plans.StepRequestError as exc:
            stepflow.fail(task, stepflow.DEPLOY, f"Deploy refused: {exc}")
            return
        if plan.completes_after is None:
            # (A provisional plan's are judged when it is completed: an override may name
            # one of the agent's steps.)
            warn_unknown_overrides(task, stepflow.DEPLOY.name, overrides, plan.supported)
        if plan.templates:
            task.record(
                "deploy_templates", f"deploy templates applied: {', '.join(plan.templates)}"
            )
        stepflow.store_plan(task, stepflow.DEPLOY, plan.steps, completes_after=plan.completes_after)
        if plan.deferred:
            task.record(
                "deploy_plan",
                "waiting for the ramdisk agent's deploy steps: "
                + ", ".join(str(d) for d in plan.deferred),
            )
    stepflow.run(task, stepflow.DEPLOY)


def deploy_wait(task: NodeTask) -> None:
    stepflow.poll(task, stepflow.DEPLOY, SPEC.timeout(task.ctx.settings))


# -- requests ------------------------------------------------------------------


def _check_plan(admission: Admission) -> None:
    """Refuse a deployment the conductor could not plan, before the node moves.

    Requested traits missing from the node, a selected template's step the
    driver lacks, a core step moved: all would otherwise end in
    ``deploy failed`` after the node left ``available``.
    """
    node = admission.node
    overrides = admission.settings.deploy_step_priority_override
    requested = list(admission.request.steps_for(fields.DEPLOY_STEPS))
    try:
        deploy_plan.plan_for_node(admission.session, admission.drivers, node, overrides, requested)
    except (step_plans.StepRequestError, UnknownDriver) as exc:
        raise bad_request(f"Cannot deploy node {node.uuid}: {exc}") from None


def _intent(admission: Admission) -> Intent:
    node, request = admission.node, admission.request
    instance_info = dict(node.instance_info)
    if request.configdrive is not None:
        instance_info["configdrive"] = request.configdrive
    return Intent(
        changes={"instance_info": instance_info},
        progress=FlowProgress.starting(
            stepflow.DEPLOY.name, request.steps_for(fields.DEPLOY_STEPS)
        ),
    )


_FIELDS = frozenset({fields.DEPLOY_STEPS, fields.CONFIGDRIVE})

SPEC = FlowSpec(
    name="deploy",
    verbs=(
        Verb(
            states.DEPLOY,
            fields=_FIELDS,
            guards=(not_in_maintenance,),
            checks=(_check_plan,),
            intent=_intent,
        ),
        Verb(
            states.REBUILD,
            fields=_FIELDS,
            guards=(not_in_maintenance, not_protected),
            checks=(_check_plan,),
            intent=_intent,
        ),
    ),
    states={
        states.DEPLOYING: FlowState(hook=deploy, agent_may_look_up=True),
        states.DEPLOY_WAIT: FlowState(
            hook=deploy_wait,
            agent_may_look_up=True,
            agent_continues=True,
            power_changes_allowed=True,
            abort_since=(1, 110),
        ),
        states.DEPLOY_HOLD: FlowState(power_changes_allowed=True),
    },
    step_flow=stepflow.DEPLOY,
    timeout_setting="deploy_callback_timeout",
)
