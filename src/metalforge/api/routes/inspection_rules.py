"""``/v1/inspection_rules`` (>=1.96): the rules applied to every processed inspection.

``services.inspection_rules`` keeps them and ``metalforge.inspection_rules``
reads and runs them; here are the paths and the views. A ``sensitive``
rule's conditions and actions are shown as ``null`` (they may hold
credentials). Below 1.96 a read is 404 and a write 405, as Ironic answers.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api import listing
from metalforge.api.auth.access import guard
from metalforge.api.gates import absent_before, refused_before
from metalforge.api.links import links
from metalforge.api.params import Query, fields, page
from metalforge.api.schemas import PatchOperation, operations
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import InspectionRule
from metalforge.errors import bad_request
from metalforge.services import inspection_rules

router = APIRouter(tags=["inspection rules"])

SINCE: Version = inspection_rules.SINCE
RULE_FIELDS: dict[str, Version] = dict.fromkeys(
    (
        "uuid",
        "description",
        "priority",
        "phase",
        "sensitive",
        "conditions",
        "actions",
        "created_at",
        "updated_at",
        "links",
    ),
    SINCE,
)
LIST_DEFAULT = ("uuid", "priority", "phase", "description")
SORTABLE = {"id", "uuid", "priority", "phase", "description", "created_at", "updated_at"}
_RULE = "inspection_rules/{rule_uuid}"
_TOO_OLD = "The API version does not allow inspection rules"
_READ = absent_before(SINCE, _TOO_OLD)
_WRITE = refused_before(SINCE, _TOO_OLD)


def rule_view(row: InspectionRule, base: str, wanted: list[str] | None = None) -> dict[str, Any]:
    names = wanted if wanted is not None else [n for n in RULE_FIELDS if n != "links"]
    body: dict[str, Any] = {}
    for name in names:
        if name == "links":
            continue
        if name in ("conditions", "actions"):
            body[name] = None if row.sensitive else getattr(row, name)
        elif name in ("created_at", "updated_at"):
            value = getattr(row, name)
            body[name] = value.isoformat() if value else None
        else:
            body[name] = getattr(row, name)
    body["links"] = links(base, "inspection_rules", row.uuid)
    return body


@router.get(
    "/inspection_rules",
    summary="List inspection rules",
    dependencies=[_READ, guard("baremetal:inspection_rule:get")],
)
@router.get(
    "/inspection_rules/",
    include_in_schema=False,
    dependencies=[_READ, guard("baremetal:inspection_rule:get")],
)
def list_rules(request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ("fields", "detail", "limit", "marker", "sort_key", "sort_dir", "phase"))
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE)
    wanted = fields(query, RULE_FIELDS)
    detail = listing.detail_or_fields(query, wanted, since=None)
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    with svc.db.read() as session:
        stmt = listing.paged(
            inspection_rules.listing(query.get("phase")), session, InspectionRule, pg
        )
        found = list(session.scalars(stmt))
        items = [rule_view(r, base, wanted) for r in found]
    last = found[-1].uuid if found else None
    page_link = listing.next_link(base, "inspection_rules", query, pg, len(found), last)
    return JSONResponse({"inspection_rules": items, **page_link})


@router.get(
    f"/{_RULE}",
    summary="Show an inspection rule",
    dependencies=[_READ, guard("baremetal:inspection_rule:get")],
)
def show_rule(rule_uuid: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ("fields",))
    wanted = fields(query, RULE_FIELDS)
    with svc.db.read() as session:
        row = inspection_rules.find_rule(session, rule_uuid)
        return JSONResponse(rule_view(row, base_url(request), wanted))


@router.post(
    "/inspection_rules",
    status_code=201,
    summary="Create an inspection rule",
    dependencies=[_WRITE, guard("baremetal:inspection_rule:create")],
)
def create_rule(request: Request, body: Any = Body(default=None)) -> JSONResponse:
    if not isinstance(body, dict):
        raise bad_request("The body must be a JSON object describing the rule")
    row = inspection_rules.create_rule(services(request), body)
    base = base_url(request)
    return JSONResponse(
        rule_view(row, base),
        status_code=201,
        headers={"Location": f"{base}/v1/inspection_rules/{row.uuid}"},
    )


@router.patch(
    f"/{_RULE}",
    summary="Update an inspection rule with a JSON patch",
    dependencies=[_WRITE, guard("baremetal:inspection_rule:update")],
)
def patch_rule(
    rule_uuid: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    row = inspection_rules.patch_rule(
        services(request), rule_uuid, request_version(request), operations(patch)
    )
    return JSONResponse(rule_view(row, base_url(request)))


@router.delete(
    f"/{_RULE}",
    status_code=204,
    summary="Delete an inspection rule",
    dependencies=[_WRITE, guard("baremetal:inspection_rule:delete")],
)
def delete_rule(rule_uuid: str, request: Request) -> Response:
    inspection_rules.delete_rule(services(request), rule_uuid)
    return Response(status_code=204)


@router.delete(
    "/inspection_rules",
    status_code=204,
    summary="Delete every stored inspection rule",
    dependencies=[_WRITE, guard("baremetal:inspection_rule:delete")],
)
def delete_rules(request: Request) -> Response:
    """Built-in rules are not stored and stay."""
    inspection_rules.delete_all(services(request))
    return Response(status_code=204)
