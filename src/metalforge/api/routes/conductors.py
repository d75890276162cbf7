"""``/v1/conductors`` (API 1.49): who is alive and what they drive."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import select

from metalforge.api import listing
from metalforge.api.auth.access import guard
from metalforge.api.links import links
from metalforge.api.params import Query, fields, page
from metalforge.api.versions import Version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Conductor
from metalforge.errors import not_found

router = APIRouter(tags=["conductors"])

MIN_VERSION: Version = (1, 49)
FIELDS: dict[str, Version] = {
    "hostname": (1, 49),
    "conductor_group": (1, 49),
    "alive": (1, 49),
    "drivers": (1, 49),
    "created_at": (1, 49),
    "updated_at": (1, 49),
    "links": (1, 49),
}
SHORT = ["hostname", "conductor_group", "alive"]


def conductor_view(
    row: Conductor, base: str, wanted: list[str], dead_after: float, now: dt.datetime
) -> dict[str, Any]:
    """``now`` on the database's clock, the one heartbeats are written with."""
    alive = row.online and (now - row.heartbeat_at).total_seconds() < dead_after
    full = {
        "hostname": row.hostname,
        "conductor_group": row.conductor_group,
        "alive": alive,
        "drivers": list(row.drivers),
        "created_at": row.created_at.isoformat(),
        "updated_at": row.heartbeat_at.isoformat(),
    }
    body = {name: full[name] for name in wanted if name != "links"}
    body["links"] = links(base, "conductors", row.hostname)
    return body


@router.get(
    "/conductors", summary="List conductors", dependencies=[guard("baremetal:conductor:get")]
)
@router.get(
    "/conductors/", include_in_schema=False, dependencies=[guard("baremetal:conductor:get")]
)
def list_conductors(request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["fields", "detail", "limit", "marker", "sort_key", "sort_dir"])
    if query.version < MIN_VERSION:
        raise not_found("The resource could not be found.")
    pg = page(query, svc.settings.api.max_limit, sortable={"id", "hostname", "conductor_group"})
    wanted = fields(query, FIELDS)
    detail = bool(query.bool("detail"))
    if wanted is None:
        wanted = [*SHORT, "drivers", "created_at", "updated_at"] if detail else SHORT
    with svc.db.read() as session:
        stmt = select(Conductor)
        if pg.marker:
            stmt = stmt.where(Conductor.hostname > pg.marker)
        column = getattr(Conductor, pg.sort_key)
        stmt = stmt.order_by(column.asc() if pg.sort_dir == "asc" else column.desc())
        rows = list(session.scalars(stmt.limit(pg.limit)))
    base = base_url(request)
    dead_after = svc.settings.conductor.heartbeat_timeout
    now = svc.db.now()
    items = [conductor_view(r, base, wanted, dead_after, now) for r in rows]
    last = rows[-1].hostname if rows else None
    page_link = listing.next_link(base, "conductors", query, pg, len(rows), last)
    return JSONResponse({"conductors": items, **page_link})


@router.get(
    "/conductors/{hostname}",
    summary="Show a conductor",
    dependencies=[guard("baremetal:conductor:get")],
)
def show_conductor(hostname: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["fields"])
    if query.version < MIN_VERSION:
        raise not_found("The resource could not be found.")
    wanted = fields(query, FIELDS) or [*SHORT, "drivers", "created_at", "updated_at"]
    with svc.db.read() as session:
        row = session.scalar(select(Conductor).where(Conductor.hostname == hostname))
        if row is None:
            raise not_found(f"Conductor {hostname} could not be found.")
        return JSONResponse(
            conductor_view(
                row,
                base_url(request),
                wanted,
                svc.settings.conductor.heartbeat_timeout,
                svc.db.now(),
            )
        )
