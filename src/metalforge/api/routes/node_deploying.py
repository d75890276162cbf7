"""``GET /v1/nodes/{id}/deploying/steps``: deploy steps a node supports, and plan previews.

A metalforge addition, the deploy counterpart of ``cleaning/steps``. Without
parameters it lists every deploy step the node's interfaces offer (priority
after ``conductor.deploy_step_priority_override``, arguments with their
descriptions), which is what deploy templates and ``deploy_steps`` may name.
``?traits=A,B`` also answers ``plan``: the exact ordered steps a deployment
with those traits in ``instance_info.traits`` would run, built by the
conductor's own function (``conductor.deploy_plan``) from the templates in
the database -- so an operator sees the effect of a template before a node
is deployed with it. A preview is refused (400) for the reasons a deploy
request would be.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import guard, require
from metalforge.api.params import Query
from metalforge.api.routes.node_cleaning import step_view
from metalforge.api.services import services
from metalforge.conductor import deploy_plan, steps
from metalforge.drivers.hardware import UnknownDriver
from metalforge.errors import bad_request
from metalforge.redaction import mask_secrets
from metalforge.services import lookup

router = APIRouter(tags=["node deploying"])


def plan_entry(step: steps.Step) -> dict[str, Any]:
    """A step as the plan runs it: effective priority and the argument values it gets."""
    return {
        "interface": step.interface,
        "step": step.step,
        "priority": step.priority,
        "args": mask_secrets(dict(step.args)),
    }


@router.get(
    "/nodes/{node_ident}/deploying/steps",
    summary="List a node's deploy steps; preview the plan for traits (metalforge addition)",
    dependencies=[guard("baremetal:node:get", "node")],
)
def list_deploy_steps(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ("traits",))
    raw_traits = query.get("traits")
    if raw_traits is not None:
        # The preview shows the templates' steps and arguments.
        require(request, "baremetal:deploy_template:get")
    overrides = steps.parse_overrides(svc.settings.conductor.deploy_step_priority_override)
    body: dict[str, Any] = {}
    with svc.db.read() as session:
        node = lookup.find_node(session, node_ident, query.version)
        try:
            found = steps.supported_steps(svc.drivers, node, "deploy", overrides)
            body["steps"] = [step_view(s) for s in found]
            if raw_traits is not None:
                traits = list(dict.fromkeys(t.strip() for t in raw_traits.split(",") if t.strip()))
                plan = deploy_plan.plan_for_node(
                    session, svc.drivers, node, overrides, traits=traits
                )
                body.update(
                    traits=traits,
                    deploy_templates=plan.templates,
                    plan=[plan_entry(s) for s in plan.steps],
                )
        except (UnknownDriver, steps.StepRequestError) as exc:
            raise bad_request(str(exc)) from None
    return JSONResponse(body)
