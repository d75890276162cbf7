"""``/v1/deploy_templates`` (>=1.55): named deploy steps selected by a node's traits.

A template whose name is one of the traits in a node's
``instance_info.traits`` adds its steps to that node's deployment (see
``conductor.deploy_plan`` for the merge rules). Templates are checked only
for their own shape -- each step with exactly ``interface``, ``step``,
``args`` and ``priority`` (the schema, here), a valid trait name, unique,
each step given once (``services.templates``, which writes them) -- because
whether a node can run a step depends on the node: that is checked when a
deployment is requested, validated or previewed.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import select

from metalforge.api import listing
from metalforge.api.auth.access import guard
from metalforge.api.gates import refused_before
from metalforge.api.links import links
from metalforge.api.params import Query, fields, page
from metalforge.api.schemas import PatchOperation, operations
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import DeployTemplate, DeployTemplateStep
from metalforge.errors import not_found
from metalforge.services import templates
from metalforge.services.bodies import DeployTemplateCreate

router = APIRouter(tags=["deploy templates"])

SINCE: Version = (1, 55)
TEMPLATE_FIELDS: dict[str, Version] = dict.fromkeys(
    ("uuid", "name", "steps", "extra", "created_at", "updated_at", "links"), SINCE
)
LIST_DEFAULT = ("uuid", "name")
SORTABLE = {"id", "uuid", "name", "created_at", "updated_at"}
_TOO_OLD = "The API version does not allow deploy templates"


def _gate_read(request: Request) -> None:
    """Below 1.55 the collection does not exist: 404, as for any unknown path."""
    if request_version(request) < SINCE:
        raise not_found(_TOO_OLD)


_WRITE = refused_before(SINCE, _TOO_OLD)
"""Below 1.55 writes are 405 -- checked before the body, as Ironic does."""


def step_view(step: DeployTemplateStep) -> dict[str, Any]:
    return {
        "interface": step.interface,
        "step": step.step,
        "args": step.args,
        "priority": step.priority,
    }


def template_view(
    template: DeployTemplate, base: str, wanted: list[str] | None = None
) -> dict[str, Any]:
    names = wanted if wanted is not None else [n for n in TEMPLATE_FIELDS if n != "links"]
    body: dict[str, Any] = {}
    for name in names:
        if name == "links":
            continue
        if name == "steps":
            body[name] = [step_view(s) for s in template.steps]
        elif name in ("created_at", "updated_at"):
            value = getattr(template, name)
            body[name] = value.isoformat() if value else None
        else:
            body[name] = getattr(template, name)
    body["links"] = links(base, "deploy_templates", template.uuid)
    return body


@router.get(
    "/deploy_templates",
    summary="List deploy templates",
    dependencies=[guard("baremetal:deploy_template:get")],
)
@router.get(
    "/deploy_templates/",
    include_in_schema=False,
    dependencies=[guard("baremetal:deploy_template:get")],
)
def list_templates(request: Request) -> JSONResponse:
    _gate_read(request)
    svc = services(request)
    query = Query(request, ("fields", "detail", "limit", "marker", "sort_key", "sort_dir"))
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE)
    wanted = fields(query, TEMPLATE_FIELDS)
    detail = listing.detail_or_fields(query, wanted, since=None)
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    with svc.db.read() as session:
        stmt = listing.paged(select(DeployTemplate), session, DeployTemplate, pg)
        found = list(session.scalars(stmt))
        items = [template_view(t, base, wanted) for t in found]
    last = found[-1].uuid if found else None
    page_link = listing.next_link(base, "deploy_templates", query, pg, len(found), last)
    return JSONResponse({"deploy_templates": items, **page_link})


@router.get(
    "/deploy_templates/{template_ident}",
    summary="Show a deploy template",
    dependencies=[guard("baremetal:deploy_template:get")],
)
def show_template(template_ident: str, request: Request) -> JSONResponse:
    _gate_read(request)
    svc = services(request)
    query = Query(request, ("fields",))
    wanted = fields(query, TEMPLATE_FIELDS)
    with svc.db.read() as session:
        template = templates.find_template(session, template_ident)
        return JSONResponse(template_view(template, base_url(request), wanted))


@router.post(
    "/deploy_templates",
    status_code=201,
    summary="Create a deploy template",
    dependencies=[_WRITE, guard("baremetal:deploy_template:create")],
)
def create_template(request: Request, body: DeployTemplateCreate) -> JSONResponse:
    template = templates.create_template(services(request), templates.spec_from(body))
    base = base_url(request)
    view = template_view(template, base)
    for shown, given in zip(view["steps"], body.steps, strict=True):
        shown["priority"] = given.priority  # a digit string is echoed as given, as Ironic does
    return JSONResponse(
        view, status_code=201, headers={"Location": f"{base}/v1/deploy_templates/{template.uuid}"}
    )


@router.patch(
    "/deploy_templates/{template_ident}",
    summary="Update a deploy template with a JSON patch",
    dependencies=[_WRITE, guard("baremetal:deploy_template:update")],
)
def patch_template(
    template_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    """``name``, ``steps`` (``/steps/-`` appends), ``extra``; the result is checked whole."""
    template = templates.patch_template(
        services(request), template_ident, request_version(request), operations(patch)
    )
    return JSONResponse(template_view(template, base_url(request)))


@router.delete(
    "/deploy_templates/{template_ident}",
    status_code=204,
    summary="Delete a deploy template",
    dependencies=[_WRITE, guard("baremetal:deploy_template:delete")],
)
def delete_template(template_ident: str, request: Request) -> Response:
    templates.delete_template(services(request), template_ident)
    return Response(status_code=204)
