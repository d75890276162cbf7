"""ironic-inspector's ``/v1/rules``: its rule format, stored once beside Ironic's rules.

The rules run in the same engine as ``/v1/inspection_rules``'s
(``inspection_rules.inspector`` reads them). Each API lists and deletes the
rules given in its own format. As ironic-inspector, a create answers 201
from API 1.6 and 200 below (python-ironic-inspector-client asks for 1.0 by
default), and links are relative.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api.auth.access import guard
from metalforge.api.inspector.versions import requested_version
from metalforge.api.wiring import services
from metalforge.db.models import InspectionRule
from metalforge.errors import bad_request
from metalforge.services import inspection_rules

router = APIRouter()

CREATED_SINCE = (1, 6)
"""From this version a create answers 201 (before it, 200)."""


def _links(row: InspectionRule) -> list[dict[str, str]]:
    return [{"href": f"/v1/rules/{row.uuid}", "rel": "self"}]


def short_view(row: InspectionRule) -> dict[str, Any]:
    return {
        "uuid": row.uuid,
        "description": row.description,
        "scope": row.scope,
        "links": _links(row),
    }


def full_view(row: InspectionRule) -> dict[str, Any]:
    return {
        "uuid": row.uuid,
        "description": row.description,
        "scope": row.scope,
        "conditions": row.conditions,
        "actions": row.actions,
        "links": _links(row),
    }


@router.post("/v1/rules", dependencies=[guard("introspection:rule:create")])
def create(request: Request, body: Any = Body(default=None)) -> JSONResponse:
    if not isinstance(body, dict):
        raise bad_request("The rule must be a JSON object")
    row = inspection_rules.create_rule(services(request), body, "inspector")
    status = 201 if requested_version(request.scope) >= CREATED_SINCE else 200
    return JSONResponse(full_view(row), status_code=status)


@router.get("/v1/rules", dependencies=[guard("introspection:rule:get")])
def list_rules(request: Request) -> JSONResponse:
    svc = services(request)
    with svc.db.read() as session:
        stmt = inspection_rules.listing(None, "inspector").order_by(InspectionRule.id)
        rows = list(session.scalars(stmt))
        return JSONResponse({"rules": [short_view(row) for row in rows]})


@router.get("/v1/rules/{rule_uuid}", dependencies=[guard("introspection:rule:get")])
def show(rule_uuid: str, request: Request) -> JSONResponse:
    with services(request).db.read() as session:
        return JSONResponse(full_view(inspection_rules.find_rule(session, rule_uuid, "inspector")))


@router.delete("/v1/rules/{rule_uuid}", dependencies=[guard("introspection:rule:delete")])
def delete(rule_uuid: str, request: Request) -> Response:
    inspection_rules.delete_rule(services(request), rule_uuid, "inspector")
    return Response(status_code=204, media_type="text/plain")


@router.delete("/v1/rules", dependencies=[guard("introspection:rule:delete")])
def delete_all(request: Request) -> Response:
    inspection_rules.delete_all(services(request), "inspector")
    return Response(status_code=204, media_type="text/plain")
