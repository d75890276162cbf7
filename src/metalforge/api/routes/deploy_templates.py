"""``/v1/deploy_templates`` (>=1.55): named deploy steps selected by a node's traits.

A template whose name is one of the traits in a node's
``instance_info.traits`` adds its steps to that node's deployment (see
``conductor.deploy_plan`` for the merge rules). Templates are checked here
only for their own shape -- a valid trait name, unique, each step given once
with exactly ``interface``, ``step``, ``args`` and ``priority`` -- because
whether a node can run a step depends on the node: that is checked when a
deployment is requested, validated or previewed.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Body, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge.api.auth.access import guard
from metalforge.api.links import links
from metalforge.api.params import Query, fields, keyset, page
from metalforge.api.patching import apply_patch
from metalforge.api.schemas import DeployTemplateCreate, PatchOperation
from metalforge.api.services import base_url, services
from metalforge.api.validation import is_valid_trait
from metalforge.api.versions import Version, request_version
from metalforge.db.models import DeployTemplate, DeployTemplateStep, utcnow
from metalforge.errors import RequestError, bad_request, conflict, not_found
from metalforge.services import lookup

router = APIRouter(tags=["deploy templates"])

SINCE: Version = (1, 55)
TEMPLATE_FIELDS: dict[str, Version] = dict.fromkeys(
    ("uuid", "name", "steps", "extra", "created_at", "updated_at", "links"), SINCE
)
LIST_DEFAULT = ("uuid", "name")
PATCHABLE = ("extra", "name", "steps")
SORTABLE = {"id", "uuid", "name", "created_at", "updated_at"}
_TOO_OLD = "The API version does not allow deploy templates"


def _gate_read(request: Request) -> None:
    """Below 1.55 the collection does not exist: 404, as for any unknown path."""
    if request_version(request) < SINCE:
        raise not_found(_TOO_OLD)


def _gate_write(request: Request) -> None:
    """Below 1.55 writes are 405 -- checked before the body, as Ironic does."""
    if request_version(request) < SINCE:
        raise RequestError(405, _TOO_OLD)


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


def find_template(session: Session, ident: str) -> DeployTemplate:
    """By UUID or by name; 404 otherwise."""
    if lookup.is_uuid(ident):
        where = DeployTemplate.uuid == str(uuidlib.UUID(ident))
    else:
        where = DeployTemplate.name == ident
    template = session.scalar(select(DeployTemplate).where(where))
    if template is None:
        raise not_found(f"Deploy template {ident} could not be found.")
    return template


def _check(body: DeployTemplateCreate) -> list[DeployTemplateStep]:
    """Rules beyond the schema: a trait name, no step twice with the same arguments; the rows.

    A step may repeat with other arguments (seed 001: partitioning several
    disks, say), which Ironic refuses; the same step with the same arguments
    twice is an operator's slip, refused.
    """
    if not is_valid_trait(body.name):
        raise bad_request(
            f"Invalid deploy template name {body.name!r}: it must be a valid trait name "
            "(a standard trait or ^CUSTOM_[A-Z0-9_]+$, at most 255 characters)"
        )
    seen: set[tuple[str, str, bytes]] = set()
    duplicates: list[str] = []
    for step in body.steps:
        key = (step.interface, step.step, orjson.dumps(step.args, option=orjson.OPT_SORT_KEYS))
        if key in seen:
            duplicates.append(f"{step.interface}.{step.step}")
        seen.add(key)
    if duplicates:
        raise bad_request(
            f"Duplicate deploy steps in deploy template {body.name}: "
            f"{', '.join(sorted(set(duplicates)))} with the same arguments. A step may "
            "repeat in a template only with other arguments."
        )
    return [
        DeployTemplateStep(
            interface=s.interface, step=s.step, args=s.args, priority=int(s.priority)
        )
        for s in body.steps
    ]


def _name_taken(name: str) -> RequestError:
    return conflict(f"A deploy template with name {name} already exists.")


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
    detail = bool(query.bool("detail"))
    if wanted is not None and detail:
        raise bad_request("Can not specify ?detail=True and fields in the same request.")
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    with svc.db.read() as session:
        after: tuple[Any, int] | None = None
        if pg.marker:
            marker = session.scalar(select(DeployTemplate).where(DeployTemplate.uuid == pg.marker))
            if marker is None:
                raise bad_request(f"Marker {pg.marker} could not be found.")
            after = (getattr(marker, pg.sort_key), marker.id)
        stmt = keyset(
            select(DeployTemplate),
            getattr(DeployTemplate, pg.sort_key),
            DeployTemplate.id,
            pg,
            after,
        )
        found = list(session.scalars(stmt))
        items = [template_view(t, base, wanted) for t in found]
    body: dict[str, Any] = {"deploy_templates": items}
    if len(found) == pg.limit:
        params = {k: v for k, v in query.params.items() if k != "marker"}
        params.update(limit=str(pg.limit), marker=found[-1].uuid)
        body["next"] = f"{base}/v1/deploy_templates?{urlencode(params)}"
    return JSONResponse(body)


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
        template = find_template(session, template_ident)
        return JSONResponse(template_view(template, base_url(request), wanted))


@router.post(
    "/deploy_templates",
    status_code=201,
    summary="Create a deploy template",
    dependencies=[Depends(_gate_write), guard("baremetal:deploy_template:create")],
)
def create_template(request: Request, body: DeployTemplateCreate) -> JSONResponse:
    svc = services(request)
    rows = _check(body)
    template_uuid = lookup.check_uuid(body.uuid) if body.uuid else str(uuidlib.uuid4())
    base = base_url(request)
    try:
        with svc.db.write() as session:
            if session.scalar(select(DeployTemplate.id).where(DeployTemplate.name == body.name)):
                raise _name_taken(body.name)
            same_uuid = select(DeployTemplate.id).where(DeployTemplate.uuid == template_uuid)
            if session.scalar(same_uuid):
                raise conflict(f"A deploy template with UUID {template_uuid} already exists.")
            template = DeployTemplate(
                uuid=template_uuid, name=body.name, extra=body.extra or {}, steps=rows
            )
            session.add(template)
            session.flush()
            view = template_view(template, base)
    except IntegrityError:  # a concurrent create won the race for the name or UUID
        raise _name_taken(body.name) from None
    for shown, given in zip(view["steps"], body.steps, strict=True):
        shown["priority"] = given.priority  # a digit string is echoed as given, as Ironic does
    return JSONResponse(
        view, status_code=201, headers={"Location": f"{base}/v1/deploy_templates/{template_uuid}"}
    )


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = "/".join(str(p) for p in err.get("loc", ())) or "body"
        parts.append(f"{where}: {err.get('msg')}")
    return "; ".join(parts)


@router.patch(
    "/deploy_templates/{template_ident}",
    summary="Update a deploy template with a JSON patch",
    dependencies=[Depends(_gate_write), guard("baremetal:deploy_template:update")],
)
def patch_template(
    template_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    """``name``, ``steps`` (``/steps/-`` appends), ``extra``; the result is checked whole."""
    svc = services(request)
    for op in patch:
        root = op.path.lstrip("/").split("/", 1)[0]
        if root not in PATCHABLE:
            raise bad_request(
                f"Cannot patch {op.path}. Only the following can be updated: {', '.join(PATCHABLE)}"
            )
    base = base_url(request)
    try:
        with svc.db.write() as session:
            template = find_template(session, template_ident)
            doc = {
                "name": template.name,
                "steps": [step_view(s) for s in template.steps],
                "extra": template.extra,
            }
            after = apply_patch(doc, patch)
            if after.get("extra") is None:
                after["extra"] = {}
            try:
                checked = DeployTemplateCreate.model_validate(after)
            except ValidationError as exc:
                raise bad_request(f"Invalid deploy template: {_describe(exc)}") from None
            rows = _check(checked)
            if checked.name != template.name:
                taken = session.scalar(
                    select(DeployTemplate.id).where(DeployTemplate.name == checked.name)
                )
                if taken:
                    raise _name_taken(checked.name)
                template.name = checked.name
            template.extra = checked.extra or {}
            if after["steps"] != doc["steps"]:
                template.steps = rows
            template.updated_at = utcnow()
            session.flush()
            session.refresh(template)
            view = template_view(template, base)
    except IntegrityError:
        raise conflict("A deploy template with that name already exists.") from None
    return JSONResponse(view)


@router.delete(
    "/deploy_templates/{template_ident}",
    status_code=204,
    summary="Delete a deploy template",
    dependencies=[Depends(_gate_write), guard("baremetal:deploy_template:delete")],
)
def delete_template(template_ident: str, request: Request) -> Response:
    svc = services(request)
    with svc.db.write() as session:
        session.delete(find_template(session, template_ident))
    return Response(status_code=204)
