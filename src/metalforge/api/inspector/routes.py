"""The ironic-inspector v1 routes, on the same engine as Ironic's inspection.

Starting an introspection is Ironic's ``inspect`` verb; aborting it is
Ironic's ``abort``; the ramdisk's ``/v1/continue`` is Ironic's
``continue_inspection`` answered the inspector's way (200, ``{"uuid"}``,
errors as 400s). Status and list read the introspection records; the data
routes what inspection stored.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from metalforge import inspection_states as ins
from metalforge.api.auth.access import actor, guard
from metalforge.api.locking import wait_for_lock
from metalforge.api.schemas import report_body, storable_report
from metalforge.api.wiring import services
from metalforge.db.introspections import Record
from metalforge.errors import bad_request
from metalforge.services import inspection, lookup

router = APIRouter()

_TRUE = ("1", "t", "true", "on", "y", "yes")
_FALSE = ("0", "f", "false", "off", "n", "no")


def _empty(status: int) -> Response:
    return JSONResponse({}, status_code=status)


def _root(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _time(value: dt.datetime | None) -> str | None:
    """Naive UTC in ISO form, as ironic-inspector prints its timestamps."""
    return None if value is None else value.astimezone(dt.UTC).replace(tzinfo=None).isoformat()


def status_view(request: Request, record: Record) -> dict[str, Any]:
    return {
        "uuid": record.node_uuid,
        "finished": record.finished,
        "state": record.state,
        "started_at": _time(record.started_at),
        "finished_at": _time(record.finished_at),
        "error": record.error,
        "links": [{"rel": "self", "href": f"{_root(request)}/v1/introspection/{record.node_uuid}"}],
    }


@router.get("/")
def versions(request: Request) -> JSONResponse:
    link = {"rel": "self", "href": f"{_root(request)}/v1"}
    return JSONResponse({"versions": [{"id": "1.18", "status": "CURRENT", "links": [link]}]})


@router.get("/v1")
@router.get("/v1/")
def resources(request: Request) -> JSONResponse:
    names = ("introspection", "continue", "rules")
    return JSONResponse(
        {
            "resources": [
                {"name": name, "links": [{"rel": "self", "href": f"{_root(request)}/v1/{name}"}]}
                for name in names
            ]
        }
    )


def _manage_boot(raw: str | None) -> bool:
    if raw is None or raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise bad_request(f"Invalid boolean value for manage_boot: {raw}")


@router.post(
    "/v1/introspection/{node_id}", dependencies=[guard("introspection:start")], status_code=202
)
@wait_for_lock
def start(node_id: str, request: Request, manage_boot: str | None = None) -> Response:
    inspection.start(services(request), node_id, _manage_boot(manage_boot), actor(request))
    return _empty(202)


@router.get("/v1/introspection/{node_id}", dependencies=[guard("introspection:status")])
def get_status(node_id: str, request: Request) -> JSONResponse:
    return JSONResponse(status_view(request, inspection.status(services(request), node_id)))


def _limit(raw: str | None, largest: int) -> int:
    if raw is None:
        return largest
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"Bad request: limit is not an integer: {raw}") from None
    if value < 0 or value > largest:
        raise bad_request(f"Bad request: limit must be between 0 and {largest}")
    return value or largest


def _states(raw: str | None) -> list[str]:
    wanted = [part.strip() for part in (raw or "").split(",") if part.strip()]
    unknown = [state for state in wanted if state not in ins.STATES]
    if unknown:
        raise bad_request(
            f"Bad request: unknown state(s) {', '.join(unknown)}; "
            f"expected some of {', '.join(ins.STATES)}"
        )
    return wanted


@router.get("/v1/introspection", dependencies=[guard("introspection:status")])
def list_statuses(
    request: Request,
    marker: str | None = None,
    limit: str | None = None,
    state: str | None = None,
) -> JSONResponse:
    if marker is not None and not lookup.is_uuid(marker):
        raise bad_request("Bad request: Marker not UUID-like")
    svc = services(request)
    records = inspection.statuses(
        svc, marker, _limit(limit, svc.settings.api.max_limit), _states(state)
    )
    return JSONResponse({"introspection": [status_view(request, r) for r in records]})


@router.post("/v1/introspection/{node_id}/abort", dependencies=[guard("introspection:abort")])
@wait_for_lock
def abort(node_id: str, request: Request) -> Response:
    inspection.abort(services(request), node_id, actor(request))
    return _empty(202)


@router.get("/v1/introspection/{node_id}/data", dependencies=[guard("introspection:data")])
def processed_data(node_id: str, request: Request) -> JSONResponse:
    return JSONResponse(inspection.data(services(request), node_id, processed=True))


@router.get(
    "/v1/introspection/{node_id}/data/unprocessed", dependencies=[guard("introspection:data")]
)
def unprocessed_data(node_id: str, request: Request) -> JSONResponse:
    return JSONResponse(inspection.data(services(request), node_id, processed=False))


@router.post(
    "/v1/introspection/{node_id}/data/unprocessed",
    dependencies=[guard("introspection:reapply")],
)
@wait_for_lock
def reapply(node_id: str, request: Request, report: Any = Depends(report_body)) -> Response:
    inspection.reapply(
        services(request), node_id, None if report is None else storable_report(report)
    )
    return _empty(202)


@router.post("/v1/continue")
def ramdisk_continue(request: Request, report: Any = Depends(report_body)) -> JSONResponse:
    node = inspection.continue_for_inspector(services(request), storable_report(report))
    return JSONResponse({"uuid": node.uuid})
