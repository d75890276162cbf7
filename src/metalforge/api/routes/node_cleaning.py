"""``GET /v1/nodes/{id}/cleaning/steps`` and ``.../servicing/steps``: the steps a node can run.

A metalforge addition: no Ironic release has it, and operators otherwise
learn step names and arguments from driver documentation before writing a
manual ``clean`` request. It answers from the same code the conductor plans
with (``conductor.step_plans.supported_steps``, operator overrides applied), so
what it lists is what ``clean`` accepts and, from priority 1 up, exactly
the automated plan in its order.

When one of the node's interfaces cannot list its steps yet (an in-band one
learns them from its ramdisk agent), the answer is 202 with
``Retry-Request-After`` (seconds, or -1 when nobody can tell) and a body
saying why (seed 002): an incomplete list would read as "this step does not
exist".
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import NODE, guard
from metalforge.api.params import Query
from metalforge.api.wiring import services
from metalforge.services import step_catalog
from metalforge.services.step_catalog import Step

router = APIRouter(tags=["node cleaning"])


def step_view(step: Step) -> dict[str, Any]:
    """One catalogue entry; ``priority`` is the effective one, after overrides."""
    return {
        "interface": step.interface,
        "step": step.step,
        "priority": step.priority,
        "abortable": step.abortable,
        "requires_ramdisk": step.requires_ramdisk,
        "args": [
            {"name": name, "description": info.description, "required": info.required}
            for name, info in step.argsinfo.items()
        ],
    }


@router.get(
    "/nodes/{node_ident}/cleaning/steps",
    summary="List the clean steps a node can run (metalforge addition)",
    responses={202: {"description": "The steps are not known yet; retry later."}},
    dependencies=[guard("baremetal:node:get", NODE)],
)
def list_clean_steps(node_ident: str, request: Request) -> Response:
    """Every clean step, highest priority first; ``min_priority=1`` is the automated plan."""
    query = Query(request, ("min_priority",))
    min_priority = query.int("min_priority")
    found = step_catalog.clean_steps(services(request), node_ident, query.version)
    if found.not_known is not None:
        return _not_known("clean", found)
    listed = found.steps
    if min_priority is not None:
        listed = [s for s in listed if s.priority >= min_priority]
    return JSONResponse({"steps": [step_view(s) for s in listed]})


@router.get(
    "/nodes/{node_ident}/servicing/steps",
    summary="List the service steps a node can run (metalforge addition)",
    responses={202: {"description": "The agent's steps are not known yet; retry later."}},
    dependencies=[guard("baremetal:node:get", NODE)],
)
def list_service_steps(node_ident: str, request: Request) -> Response:
    """Every service step: what ``service`` (and a runbook used for it) accepts."""
    query = Query(request, ())
    found = step_catalog.service_steps(services(request), node_ident, query.version)
    if found.not_known is not None:
        return _not_known("service", found)
    return JSONResponse({"steps": [step_view(s) for s in found.steps]})


def _not_known(kind: str, found: step_catalog.KnownSteps) -> JSONResponse:
    """202: the agent that reports the node's steps has not (``Retry-Request-After``: when
    to ask again, -1 when no agent is on its way)."""
    message = f"The {kind} steps of node {found.node_uuid} are not known yet: {found.not_known}"
    return JSONResponse(
        {"message": message},
        status_code=202,
        headers={"Retry-Request-After": str(found.retry_after)},
    )
