"""``/v1/portgroups`` (>=1.23): a node's ports bonded together.

Lists and views are read here; writes are parsed here and made by
``services.portgroups``, which holds Ironic's rules (unique address and
name, moves and ``standalone_ports_supported`` only where safe, no deletion
of a group with member ports) and fences the node. ``/v1/nodes/{node}/portgroups``
lists one node's groups (>=1.24); a group's member ports are listed by
``routes.ports``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from metalforge.api import listing
from metalforge.api.auth.access import (
    BODY,
    LIST,
    NODE_LIST,
    PORTGROUP,
    guard,
    policy_caller,
    project_scope,
    visible_node,
)
from metalforge.api.links import links, sub_links
from metalforge.api.locking import wait_for_lock
from metalforge.api.params import Page, Query, fields, page
from metalforge.api.schemas import PatchOperation, operations
from metalforge.api.versions import Version, fmt, request_version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Node, Portgroup
from metalforge.errors import bad_request, not_acceptable
from metalforge.services import lookup
from metalforge.services import portgroups as portgroup_service
from metalforge.services.bodies import PortgroupCreate

router = APIRouter(tags=["portgroups"])

SINCE = portgroup_service.SINCE
PORTGROUP_FIELDS: dict[str, Version] = {
    **dict.fromkeys(
        (
            "uuid",
            "address",
            "name",
            "node_uuid",
            "extra",
            "internal_info",
            "standalone_ports_supported",
            "created_at",
            "updated_at",
            "links",
            "ports",
        ),
        SINCE,
    ),
    "mode": (1, 26),
    "properties": (1, 26),
    "physical_network": (1, 102),
    "category": (1, 103),
    "dynamic_portgroup": (1, 111),
}
LIST_DEFAULT = ("uuid", "address", "name")
SORTABLE = {"id", "uuid", "name", "address", "created_at", "updated_at", "mode"}


def _gate(request: Request) -> None:
    if request_version(request) < SINCE:
        raise lookup.not_found_path()


def portgroup_view(
    group: Portgroup, version: Version, base: str, wanted: list[str] | None = None
) -> dict[str, Any]:
    names = (
        wanted if wanted is not None else [n for n, v in PORTGROUP_FIELDS.items() if v <= version]
    )
    body: dict[str, Any] = {}
    for name in names:
        if name == "links":
            continue
        if name == "node_uuid":
            body[name] = group.node.uuid
        elif name == "ports":
            body[name] = sub_links(base, "portgroups", group.uuid, "ports")
        elif name == "dynamic_portgroup":
            body[name] = False  # metalforge never forms a group by itself
        elif name in ("created_at", "updated_at"):
            value = getattr(group, name)
            body[name] = value.isoformat() if value else None
        else:
            body[name] = getattr(group, name)
    body["links"] = links(base, "portgroups", group.uuid)
    return body


def _list(request: Request, *, detail_path: bool, node: str | None = None) -> dict[str, Any]:
    """A page of port groups; ``node`` is the node a sub-collection path names."""
    _gate(request)
    svc = services(request)
    allowed = ["node", "address", "shard", "conductor_groups", "limit", "marker"]
    allowed += ["sort_key", "sort_dir"]
    if not detail_path:
        allowed += ["fields", "detail"]
    query = Query(request, allowed)
    if node is not None:
        if query.version < (1, 24):
            raise lookup.not_found_path()
        query.params["node"] = node
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE)
    wanted = fields(query, PORTGROUP_FIELDS) if not detail_path else None
    detail = listing.detail_or_fields(query, wanted, detail_path=detail_path, since=(1, 43))
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    with svc.db.read() as session:
        found = list(session.scalars(_list_query(request, session, query, pg)))
        items = [portgroup_view(g, query.version, base, wanted) for g in found]
    path = "portgroups/detail" if detail_path else "portgroups"
    if node is not None:
        path = f"nodes/{node}/{path}"
    last = found[-1].uuid if found else None
    return {"portgroups": items, **listing.next_link(base, path, query, pg, len(found), last)}


def _list_query(request: Request, session: Session, query: Query, pg: Page) -> Select[Any]:
    """The page's query: one of Ironic's exclusive filters, the caller's project, the marker."""
    node_ident, address = query.get("node"), query.get("address")
    shard, groups = query.get("shard", (1, 106)), query.get("conductor_groups", (1, 99))
    if sum(v is not None for v in (node_ident, address, shard, groups)) > 1:
        raise bad_request("Filtering by node, address, or shard simultaneously is not supported.")
    project = project_scope(request)
    stmt = select(Portgroup).join(Node, Node.id == Portgroup.node_id)
    if node_ident is not None:
        node = visible_node(request, session, node_ident, query.version)
        if node is None:
            raise lookup.node_not_found(node_ident)
        stmt = stmt.where(Portgroup.node_id == node.id)
    if address is not None:
        stmt = stmt.where(Portgroup.address == address.lower())
    if shard is not None:
        stmt = stmt.where(Node.shard.in_([s.strip() for s in shard.split(",") if s.strip()]))
    if groups is not None:
        wanted = [g.strip().lower() for g in groups.split(",")]
        stmt = stmt.where(Node.conductor_group.in_(wanted))
    if project is not None:
        stmt = stmt.where(lookup.held_by(project))
    scope: listing.Scope | None = None
    if project is not None:
        scope = lambda q: q.join(Node, Node.id == Portgroup.node_id).where(  # noqa: E731
            lookup.held_by(project)
        )
    return listing.paged(stmt, session, Portgroup, pg, scope)


_LIST = guard("baremetal:portgroup:list_all", LIST)
_NODE_LIST = guard("baremetal:portgroup:list_all", NODE_LIST)


@router.get("/portgroups", summary="List port groups", dependencies=[_LIST])
@router.get("/portgroups/", include_in_schema=False, dependencies=[_LIST])
def list_portgroups(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=False))


@router.get("/portgroups/detail", summary="List port groups with every field", dependencies=[_LIST])
def list_portgroups_detail(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=True))


@router.get(
    "/nodes/{node_ident}/portgroups", summary="List a node's port groups", dependencies=[_NODE_LIST]
)
def list_node_portgroups(node_ident: str, request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=False, node=node_ident))


@router.get(
    "/nodes/{node_ident}/portgroups/detail",
    summary="List a node's port groups with every field",
    dependencies=[_NODE_LIST],
)
def list_node_portgroups_detail(node_ident: str, request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=True, node=node_ident))


@router.get(
    "/portgroups/{portgroup_ident}",
    summary="Show a port group",
    dependencies=[guard("baremetal:portgroup:get", PORTGROUP)],
)
def show_portgroup(portgroup_ident: str, request: Request) -> JSONResponse:
    _gate(request)
    svc = services(request)
    query = Query(request, ("fields",))
    wanted = fields(query, PORTGROUP_FIELDS)
    with svc.db.read() as session:
        group = portgroup_service.find_portgroup(session, portgroup_ident)
        return JSONResponse(portgroup_view(group, query.version, base_url(request), wanted))


def _check_fields(names: set[str], version: Version) -> None:
    for name in sorted(names):
        since = PORTGROUP_FIELDS.get(name)
        if since is not None and version < since:
            raise not_acceptable(f"Field {name} is not available at API version {fmt(version)}")


@router.post(
    "/portgroups",
    status_code=201,
    summary="Create a port group",
    dependencies=[guard("baremetal:portgroup:create", BODY)],
)
@wait_for_lock
def create_portgroup(request: Request, body: PortgroupCreate) -> JSONResponse:
    _gate(request)
    version = request_version(request)
    _check_fields(set(body.model_dump(exclude_unset=True)), version)
    group = portgroup_service.create_portgroup(
        services(request),
        portgroup_service.spec_from(body, body.uuid),
        version,
        caller=policy_caller(request),
    )
    base = base_url(request)
    return JSONResponse(
        portgroup_view(group, version, base),
        status_code=201,
        headers={"Location": f"{base}/v1/portgroups/{group.uuid}"},
    )


@router.patch(
    "/portgroups/{portgroup_ident}",
    summary="Update a port group with a JSON patch",
    dependencies=[guard("baremetal:portgroup:update", PORTGROUP)],
)
@wait_for_lock
def patch_portgroup(
    portgroup_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    _gate(request)
    version = request_version(request)
    group = portgroup_service.patch_portgroup(
        services(request),
        portgroup_ident,
        version,
        operations(patch),
        caller=policy_caller(request),
    )
    return JSONResponse(portgroup_view(group, version, base_url(request)))


@router.delete(
    "/portgroups/{portgroup_ident}",
    status_code=204,
    summary="Delete a port group",
    dependencies=[guard("baremetal:portgroup:delete", PORTGROUP)],
)
@wait_for_lock
def delete_portgroup(portgroup_ident: str, request: Request) -> Response:
    _gate(request)
    portgroup_service.delete_portgroup(services(request), portgroup_ident)
    return Response(status_code=204)
