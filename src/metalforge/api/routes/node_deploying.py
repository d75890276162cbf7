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
request would be. Entries naming the ramdisk agent's own steps, which only
its report can place, are listed apart (``agent_steps``): the plan shows
the declared steps, and the deployment adds those once its agent reported.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, guard, require
from metalforge.api.params import Query
from metalforge.api.routes.node_cleaning import step_view
from metalforge.api.wiring import services
from metalforge.redaction import mask_secrets
from metalforge.services import step_catalog
from metalforge.services.step_catalog import Step

router = APIRouter(tags=["node deploying"])


def plan_entry(step: Step) -> dict[str, Any]:
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
    dependencies=[guard("baremetal:node:get", NODE)],
)
def list_deploy_steps(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ("traits",))
    raw_traits = query.get("traits")
    if raw_traits is not None:
        # The preview shows the templates' steps and arguments.
        require(request, "baremetal:deploy_template:get")
    traits = None
    if raw_traits is not None:
        traits = list(dict.fromkeys(t.strip() for t in raw_traits.split(",") if t.strip()))
    found = step_catalog.deploy_steps(svc, node_ident, query.version, traits)
    body: dict[str, Any] = {"steps": [step_view(s) for s in found.steps]}
    if found.plan is not None:
        body.update(
            traits=traits,
            deploy_templates=found.templates,
            plan=[plan_entry(s) for s in found.plan],
        )
        if found.deferred:
            body["agent_steps"] = [
                {"step": d.name, "priority": d.priority, "from": d.label} for d in found.deferred
            ]
    return JSONResponse(body)
