"""``/v1/nodes/{id}/history`` (API 1.78): what happened to a node, newest last."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import select

from metalforge.api.auth.access import NODE, guard
from metalforge.api.links import links
from metalforge.api.params import Query, page_limit
from metalforge.api.versions import Version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import NodeHistory
from metalforge.errors import not_found
from metalforge.services import lookup

router = APIRouter(tags=["node history"])

MIN_VERSION: Version = (1, 78)
SHORT = ("uuid", "created_at", "severity", "event")


def history_view(row: NodeHistory, base: str, node_uuid: str, detail: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "uuid": row.uuid,
        "created_at": row.created_at.isoformat(),
        "severity": row.severity,
        "event": row.event,
    }
    if detail:
        body.update(
            event_type=row.event_type,
            conductor=row.conductor,
            user=row.user,
            project=None,
            state=row.state,
            target_provision_state=row.target_provision_state,
            duration_seconds=row.duration_seconds,
        )
    body["links"] = links(base, f"nodes/{node_uuid}/history", row.uuid)
    return body


@router.get(
    "/nodes/{node_ident}/history",
    summary="List a node's history",
    dependencies=[guard("baremetal:node:history:get", NODE)],
)
def list_history(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["detail", "limit", "marker"])
    if query.version < MIN_VERSION:
        raise not_found("The resource could not be found.")
    detail = bool(query.bool("detail"))
    limit = page_limit(query, svc.settings.api.max_limit)
    with svc.db.read() as session:
        node = lookup.find_node(session, node_ident, query.version)
        stmt = select(NodeHistory).where(NodeHistory.node_id == node.id)
        marker = query.get("marker")
        if marker:
            marker_row = session.scalar(
                select(NodeHistory).where(
                    NodeHistory.uuid == marker, NodeHistory.node_id == node.id
                )
            )
            if marker_row is None:
                raise not_found(f"Node history event {marker} could not be found.")
            stmt = stmt.where(NodeHistory.id > marker_row.id)
        stmt = stmt.order_by(NodeHistory.id).limit(limit)
        rows = list(session.scalars(stmt))
        base = base_url(request)
        return JSONResponse({"history": [history_view(r, base, node.uuid, detail) for r in rows]})


@router.get(
    "/nodes/{node_ident}/history/{event_uuid}",
    summary="Show one history event",
    dependencies=[guard("baremetal:node:history:get", NODE)],
)
def show_history(node_ident: str, event_uuid: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, [])
    if query.version < MIN_VERSION:
        raise not_found("The resource could not be found.")
    with svc.db.read() as session:
        node = lookup.find_node(session, node_ident, query.version)
        row = session.scalar(
            select(NodeHistory).where(
                NodeHistory.node_id == node.id, NodeHistory.uuid == event_uuid
            )
        )
        if row is None:
            raise not_found(f"Node history event {event_uuid} could not be found.")
        return JSONResponse(history_view(row, base_url(request), node.uuid, True))
