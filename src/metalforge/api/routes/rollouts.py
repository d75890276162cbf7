"""``/v1/rollouts``: metalforge's own resource, one change rolled out over many nodes.

``services.rollouts`` plans, stores and advances them; here are the paths
and the views. A rollout is created, read, paused, resumed and aborted,
never patched or deleted (it is the record of what was done to the fleet).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse

from metalforge.api import listing
from metalforge.api.auth.access import (
    LIST,
    ROLLOUT,
    actor,
    allows,
    guard,
    identity_of,
    policy_caller,
    project_scope,
)
from metalforge.api.links import links
from metalforge.api.params import Query, fields, page
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Rollout, RolloutNode
from metalforge.errors import bad_request
from metalforge.services import rollouts
from metalforge.services.bodies import RolloutCreate, checked
from metalforge.services.caller import denied
from metalforge.services.context import Services

router = APIRouter(tags=["rollouts"])

_ANY: tuple[int, int] = (1, 1)
ROLLOUT_FIELDS = dict.fromkeys(
    (
        "uuid",
        "name",
        "state",
        "action",
        "selector",
        "canary",
        "batch",
        "max_failures",
        "window",
        "paused_reason",
        "last_error",
        "created_by",
        "node_counts",
        "nodes",
        "created_at",
        "updated_at",
        "finished_at",
        "links",
    ),
    _ANY,
)
LIST_DEFAULT = ("uuid", "name", "state", "node_counts")
SORTABLE = {"id", "uuid", "name", "state", "created_at", "updated_at"}
_ROLLOUT = "rollouts/{rollout_ident}"
_GET = guard("metalforge:rollout:get", ROLLOUT)
_LIST = guard("metalforge:rollout:list_all", LIST)
_UPDATE = guard("metalforge:rollout:update", ROLLOUT)


def _when(value: Any) -> str | None:
    return value.isoformat() if value else None


def _node_view(row: RolloutNode, names: dict[int, str | None]) -> dict[str, Any]:
    return {
        "node_uuid": row.node_uuid,
        "node_name": names.get(row.node_id),
        "wave": row.wave,
        "state": row.state,
        "verb": row.verb or None,
        "verbs": row.verbs.split(",") if row.verbs else [],
        "outcome": row.outcome,
        "error": row.error,
        "started_at": _when(row.started_at),
        "finished_at": _when(row.finished_at),
    }


def rollout_view(
    row: Rollout,
    nodes: Sequence[RolloutNode],
    names: dict[int, str | None],
    base: str,
    wanted: list[str] | None = None,
) -> dict[str, Any]:
    shown = wanted if wanted is not None else [n for n in ROLLOUT_FIELDS if n != "links"]
    derived: dict[str, Callable[[], Any]] = {
        "window": lambda: (
            None
            if row.window_start is None
            else {"start_hour": row.window_start, "end_hour": row.window_end}
        ),
        "node_counts": lambda: {
            state: sum(1 for n in nodes if n.state == state) for state in rollouts.NODE_STATES
        },
        "nodes": lambda: [_node_view(n, names) for n in nodes],
    }
    body: dict[str, Any] = {}
    for name in shown:
        if name == "links":
            continue
        if name in derived:
            body[name] = derived[name]()
        elif name in ("created_at", "updated_at", "finished_at"):
            body[name] = _when(getattr(row, name))
        else:
            body[name] = getattr(row, name)
    body["links"] = links(base, "rollouts", row.uuid)
    return body


def _shown(svc: Services, ident: str, base: str, wanted: list[str] | None = None) -> JSONResponse:
    with svc.db.read() as session:
        row = rollouts.find_rollout(session, ident)
        nodes = rollouts.rows_of(session, [row.id])[row.id]
        names = rollouts.node_names(session, nodes)
        return JSONResponse(rollout_view(row, nodes, names, base, wanted))


@router.get("/rollouts", summary="List rollouts", dependencies=[_LIST])
@router.get("/rollouts/", include_in_schema=False, dependencies=[_LIST])
def list_rollouts(request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ("fields", "detail", "limit", "marker", "sort_key", "sort_dir", "state"))
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE)
    wanted = fields(query, ROLLOUT_FIELDS)
    detail = listing.detail_or_fields(query, wanted, since=None)
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    with svc.db.read() as session:
        chosen = rollouts.listing(query.get("state"), project_scope(request))
        stmt = listing.paged(chosen, session, Rollout, pg)
        found = list(session.scalars(stmt))
        nodes = rollouts.rows_of(session, [r.id for r in found])
        names = rollouts.node_names(session, [n for rows in nodes.values() for n in rows])
        items = [rollout_view(r, nodes[r.id], names, base, wanted) for r in found]
    last = found[-1].uuid if found else None
    page_link = listing.next_link(base, "rollouts", query, pg, len(found), last)
    return JSONResponse({"rollouts": items, **page_link})


@router.get(f"/{_ROLLOUT}", summary="Show a rollout and each node's part", dependencies=[_GET])
def show_rollout(rollout_ident: str, request: Request) -> JSONResponse:
    wanted = fields(Query(request, ("fields",)), ROLLOUT_FIELDS)
    return _shown(services(request), rollout_ident, base_url(request), wanted)


@router.post(
    "/rollouts",
    status_code=201,
    summary="Create a rollout",
    dependencies=[guard("metalforge:rollout:create")],
)
def create_rollout(request: Request, body: Any = Body(default=None)) -> JSONResponse:
    if not isinstance(body, dict):
        raise bad_request("The body must be a JSON object describing the rollout")
    parsed = checked(RolloutCreate, body, "rollout")
    svc = services(request)
    project = None
    if not allows(request, "metalforge:rollout:list_all"):
        project = identity_of(request).project_id
        if project is None:
            raise denied("metalforge:rollout:create")
    row = rollouts.create_rollout(svc, parsed, policy_caller(request), project, actor(request))
    base = base_url(request)
    response = _shown(svc, row.uuid, base)
    response.status_code = 201
    response.headers["Location"] = f"{base}/v1/rollouts/{row.uuid}"
    return response


@router.post(f"/{_ROLLOUT}/pause", summary="Pause a rollout", dependencies=[_UPDATE])
def pause_rollout(rollout_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    row = rollouts.pause(svc, rollout_ident)
    return _shown(svc, row.uuid, base_url(request))


@router.post(f"/{_ROLLOUT}/resume", summary="Resume a paused rollout", dependencies=[_UPDATE])
def resume_rollout(rollout_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    row = rollouts.resume(svc, rollout_ident)
    return _shown(svc, row.uuid, base_url(request))


@router.post(f"/{_ROLLOUT}/abort", summary="Abort a rollout", dependencies=[_UPDATE])
def abort_rollout(rollout_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    row = rollouts.abort(svc, rollout_ident)
    return _shown(svc, row.uuid, base_url(request))
