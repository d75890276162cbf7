"""``/v1/firmware_baselines``: metalforge's own resource, the firmware the fleet should run.

``services.firmware_baselines`` keeps them and works out the drift report;
here are the paths and the views. A baseline is created and deleted, never
patched (a rollout or report naming it always means the same versions).
Ironic has no such resource, so no microversion gates it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse

from metalforge.api import listing
from metalforge.api.auth.access import guard
from metalforge.api.links import links
from metalforge.api.params import Query, fields, page
from metalforge.api.wiring import base_url, services
from metalforge.db.models import FirmwareBaseline
from metalforge.errors import bad_request
from metalforge.redaction import mask_document
from metalforge.services import firmware_baselines
from metalforge.services.bodies import FirmwareBaselineCreate, checked
from metalforge.services.firmware_baselines import DriftReport

router = APIRouter(tags=["firmware baselines"])

_ANY: tuple[int, int] = (1, 1)
BASELINE_FIELDS = dict.fromkeys(
    (
        "uuid",
        "name",
        "description",
        "vendor",
        "model",
        "components",
        "created_at",
        "updated_at",
        "links",
    ),
    _ANY,
)
LIST_DEFAULT = ("uuid", "name", "vendor", "model")
SORTABLE = {"id", "uuid", "name", "vendor", "model", "created_at", "updated_at"}
_BASELINE = "firmware_baselines/{baseline_ident}"
_GET = guard("metalforge:firmware_baseline:get")


def baseline_view(
    row: FirmwareBaseline, base: str, wanted: list[str] | None = None
) -> dict[str, Any]:
    names = wanted if wanted is not None else [n for n in BASELINE_FIELDS if n != "links"]
    body: dict[str, Any] = {}
    for name in names:
        if name == "links":
            continue
        value = getattr(row, name)
        if name in ("created_at", "updated_at"):
            value = value.isoformat() if value else None
        elif name == "components":
            # A component's URL may carry the credentials of the server it is on.
            value = mask_document(value)
        body[name] = value
    body["links"] = links(base, "firmware_baselines", row.uuid)
    return body


def drift_view(report: DriftReport) -> dict[str, Any]:
    return {
        "baseline_uuid": report.baseline.uuid,
        "baseline_name": report.baseline.name,
        "covered_nodes": len(report.covered),
        "nodes": [
            {
                "node_uuid": node.node_uuid,
                "node_name": node.node_name,
                "provision_state": node.provision_state,
                "components": [
                    {
                        "component": item.component,
                        "expected_version": item.expected,
                        "current_version": item.current,
                        "status": item.status,
                    }
                    for item in node.components
                ],
            }
            for node in report.nodes
        ],
    }


@router.get("/firmware_baselines", summary="List firmware baselines", dependencies=[_GET])
@router.get("/firmware_baselines/", include_in_schema=False, dependencies=[_GET])
def list_baselines(request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ("fields", "detail", "limit", "marker", "sort_key", "sort_dir"))
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE)
    wanted = fields(query, BASELINE_FIELDS)
    detail = listing.detail_or_fields(query, wanted, since=None)
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    with svc.db.read() as session:
        stmt = listing.paged(firmware_baselines.listing(), session, FirmwareBaseline, pg)
        found = list(session.scalars(stmt))
        items = [baseline_view(b, base, wanted) for b in found]
    last = found[-1].uuid if found else None
    page_link = listing.next_link(base, "firmware_baselines", query, pg, len(found), last)
    return JSONResponse({"firmware_baselines": items, **page_link})


@router.get(f"/{_BASELINE}", summary="Show a firmware baseline", dependencies=[_GET])
def show_baseline(baseline_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    wanted = fields(Query(request, ("fields",)), BASELINE_FIELDS)
    with svc.db.read() as session:
        row = firmware_baselines.find_baseline(session, baseline_ident)
        return JSONResponse(baseline_view(row, base_url(request), wanted))


@router.get(
    f"/{_BASELINE}/drift",
    summary="The nodes a firmware baseline covers whose firmware differs from it",
    dependencies=[_GET],
)
def show_drift(baseline_ident: str, request: Request) -> JSONResponse:
    Query(request, ())
    report = firmware_baselines.drift_report(services(request), baseline_ident)
    return JSONResponse(drift_view(report))


@router.post(
    "/firmware_baselines",
    status_code=201,
    summary="Create a firmware baseline",
    dependencies=[guard("metalforge:firmware_baseline:create")],
)
def create_baseline(request: Request, body: Any = Body(default=None)) -> JSONResponse:
    if not isinstance(body, dict):
        raise bad_request("The body must be a JSON object describing the firmware baseline")
    parsed = checked(FirmwareBaselineCreate, body, "firmware baseline")
    row = firmware_baselines.create_baseline(services(request), parsed)
    base = base_url(request)
    return JSONResponse(
        baseline_view(row, base),
        status_code=201,
        headers={"Location": f"{base}/v1/firmware_baselines/{row.uuid}"},
    )


@router.delete(
    f"/{_BASELINE}",
    status_code=204,
    summary="Delete a firmware baseline",
    dependencies=[guard("metalforge:firmware_baseline:delete")],
)
def delete_baseline(baseline_ident: str, request: Request) -> Response:
    firmware_baselines.delete_baseline(services(request), baseline_ident)
    return Response(status_code=204)
