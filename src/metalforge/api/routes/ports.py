"""``/v1/ports``: the node's network ports, matched by MAC on agent lookup.

Lists and views are read here. Writes are checked for shape here (fields
the version knows, value types) and made by ``metalforge.services.ports``,
which applies the rules on the port's node and fences the node write.
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
    PORT,
    allows,
    guard,
    policy_caller,
    project_scope,
    visible_node,
)
from metalforge.api.auth.policy import node_target
from metalforge.api.links import links
from metalforge.api.locking import wait_for_lock
from metalforge.api.params import Page, Query, fields, page
from metalforge.api.schemas import PatchOperation, PortCreate, operations
from metalforge.api.versions import Version, fmt, request_version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Node, Port, Portgroup
from metalforge.errors import bad_request, not_acceptable
from metalforge.services import lookup
from metalforge.services import ports as port_service
from metalforge.services.ports import NewPort

router = APIRouter(tags=["ports"])

PORT_FIELDS: dict[str, Version] = {
    "uuid": (1, 1),
    "address": (1, 1),
    "node_uuid": (1, 1),
    "extra": (1, 1),
    "created_at": (1, 1),
    "updated_at": (1, 1),
    "links": (1, 1),
    "internal_info": (1, 18),
    "pxe_enabled": (1, 19),
    "local_link_connection": (1, 19),
    "portgroup_uuid": (1, 24),
    "physical_network": (1, 34),
    "is_smartnic": (1, 53),
    "name": (1, 88),
    "description": (1, 97),
    "vendor": (1, 100),
    "category": (1, 101),
    "available_for_dynamic_portgroup": (1, 111),
}
LIST_DEFAULT = ("uuid", "address")


def port_view(
    port: Port, version: Version, base: str, wanted: list[str] | None = None
) -> dict[str, Any]:
    names = (
        wanted
        if wanted is not None
        else [n for n, since in PORT_FIELDS.items() if since <= version and n != "links"]
    )
    body: dict[str, Any] = {}
    for name in names:
        if name == "links":
            continue
        if name == "node_uuid":
            body[name] = port.node.uuid
        elif name == "portgroup_uuid":
            body[name] = port.portgroup.uuid if port.portgroup is not None else None
        elif name in ("created_at", "updated_at"):
            value = getattr(port, name)
            body[name] = value.isoformat() if value else None
        else:
            body[name] = getattr(port, name)
    body["links"] = links(base, "ports", port.uuid)
    return body


LIST_PARAMETERS = (
    "node",
    "node_uuid",
    "address",
    "portgroup",
    "shard",
    "description_contains",
    "conductor_groups",
    "limit",
    "marker",
    "sort_key",
    "sort_dir",
)


def _list(
    request: Request, detail_path: bool, *, parent: tuple[str, str] | None = None
) -> dict[str, Any]:
    """A page of ports; ``parent`` (``("nodes", ident)`` or ``("portgroups", ident)``) is the
    resource a sub-collection path names, which filters as ``node``/``portgroup`` would."""
    svc = services(request)
    allowed = list(LIST_PARAMETERS)
    if not detail_path:
        allowed += ["fields", "detail"]
    query = Query(request, allowed)
    if parent is not None:
        if parent[0] == "portgroups" and query.version < (1, 24):
            raise lookup.not_found_path()  # a node's ports are listed at every version
        query.params["node" if parent[0] == "nodes" else "portgroup"] = parent[1]
    sortable = {"id", "uuid", "address", "created_at", "updated_at", "name", "pxe_enabled"}
    pg = page(query, svc.settings.api.max_limit, sortable=sortable)
    wanted = fields(query, PORT_FIELDS) if not detail_path else None
    detail = listing.detail_or_fields(query, wanted, detail_path=detail_path)
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    with svc.db.read() as session:
        ports = list(session.scalars(_list_query(request, session, query, pg)))
        items = [port_view(p, query.version, base, wanted) for p in ports]
    path = "ports/detail" if detail_path else "ports"
    if parent is not None:
        path = f"{parent[0]}/{parent[1]}/{path}"
    last = ports[-1].uuid if ports else None
    return {"ports": items, **listing.next_link(base, path, query, pg, len(ports), last)}


def _list_query(request: Request, session: Session, query: Query, pg: Page) -> Select[Any]:
    """The page's query: the filters, the caller's project, the marker."""
    project = project_scope(request)
    stmt = select(Port)
    node_ident = query.get("node") or query.get("node_uuid")
    if node_ident is not None:
        # A node the caller may not see is answered as a missing one.
        node = visible_node(request, session, node_ident, query.version)
        if node is None:
            raise lookup.node_not_found(node_ident)
        stmt = stmt.where(Port.node_id == node.id)
    shard = query.get("shard")
    if project is not None or shard is not None:
        stmt = stmt.join(Node, Node.id == Port.node_id)
    if project is not None:
        # As Ironic: the ports of the nodes the project owns or leases.
        stmt = stmt.where(lookup.held_by(project))
    if (group_ident := query.get("portgroup", (1, 24))) is not None:
        group = session.scalar(select(Portgroup).where(lookup.portgroup_where(group_ident)))
        if group is None or not allows(
            request, "baremetal:node:get", node_target(group.node.owner, group.node.lessee)
        ):
            raise lookup.portgroup_not_found(group_ident)
        stmt = stmt.where(Port.portgroup_id == group.id)
    if (address := query.get("address")) is not None:
        stmt = stmt.where(Port.address == address.lower())
    if (text := query.get("description_contains")) is not None:
        stmt = stmt.where(Port.description.contains(text, autoescape=True))
    if shard is not None:
        stmt = stmt.where(Node.shard.in_([s.strip() for s in shard.split(",")]))
    return listing.paged(stmt, session, Port, pg, _project_scope(project))


def _project_scope(project: str | None) -> listing.Scope | None:
    """A project sees the ports of the nodes it owns or leases (a hidden marker is missing)."""
    if project is None:
        return None
    return lambda q: q.join(Node, Node.id == Port.node_id).where(lookup.held_by(project))


@router.get("/ports", summary="List ports", dependencies=[guard("baremetal:port:list_all", LIST)])
@router.get(
    "/ports/", include_in_schema=False, dependencies=[guard("baremetal:port:list_all", LIST)]
)
def list_ports(request: Request) -> JSONResponse:
    if "binding:host_id" in request.query_params:
        # Not an Ironic query: standalone metalsmith sends the Networking API's
        # port lookup here to print its result. Ironic answers 400, which makes
        # `metalsmith deploy` fail after the deployment succeeded; metalforge
        # deliberately answers that no (Networking) ports are bound instead.
        return JSONResponse({"ports": []})
    return JSONResponse(_list(request, False))


@router.get(
    "/ports/detail",
    summary="List ports with every field",
    dependencies=[guard("baremetal:port:list_all", LIST)],
)
def list_ports_detail(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, True))


@router.get(
    "/nodes/{node_ident}/ports",
    summary="List a node's ports",
    dependencies=[guard("baremetal:port:list_all", NODE_LIST)],
)
def list_node_ports(node_ident: str, request: Request) -> JSONResponse:
    return JSONResponse(_list(request, False, parent=("nodes", node_ident)))


@router.get(
    "/nodes/{node_ident}/ports/detail",
    summary="List a node's ports with every field",
    dependencies=[guard("baremetal:port:list_all", NODE_LIST)],
)
def list_node_ports_detail(node_ident: str, request: Request) -> JSONResponse:
    return JSONResponse(_list(request, True, parent=("nodes", node_ident)))


@router.get(
    "/portgroups/{portgroup_ident}/ports",
    summary="List a port group's ports",
    dependencies=[guard("baremetal:port:list_all", LIST)],
)
def list_portgroup_ports(portgroup_ident: str, request: Request) -> JSONResponse:
    return JSONResponse(_list(request, False, parent=("portgroups", portgroup_ident)))


@router.get(
    "/portgroups/{portgroup_ident}/ports/detail",
    summary="List a port group's ports with every field",
    dependencies=[guard("baremetal:port:list_all", LIST)],
)
def list_portgroup_ports_detail(portgroup_ident: str, request: Request) -> JSONResponse:
    return JSONResponse(_list(request, True, parent=("portgroups", portgroup_ident)))


@router.get(
    "/ports/{port_ident}", summary="Show a port", dependencies=[guard("baremetal:port:get", PORT)]
)
def show_port(port_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["fields"])
    wanted = fields(query, PORT_FIELDS)
    with svc.db.read() as session:
        port = port_service.find_port(session, port_ident, query.version)
        return JSONResponse(port_view(port, query.version, base_url(request), wanted))


def _gate(names: set[str], version: Version) -> None:
    for name in sorted(names):
        since = PORT_FIELDS.get(name) or ((1, 94) if name == "node_ident" else None)
        if since is not None and version < since:
            raise not_acceptable(f"Field {name} is not available at API version {fmt(version)}")


def _new_port(body: PortCreate, version: Version) -> NewPort:
    """The port the body asks for, checked for what this version and service accept."""
    _gate(set(body.model_dump(exclude_unset=True)), version)
    if (body.node_uuid is None) == (body.node_ident is None):
        raise bad_request("Exactly one of node_uuid and node_ident is required")
    return NewPort(
        node=str(body.node_uuid or body.node_ident),
        address=body.address,
        uuid=body.uuid,
        name=body.name,
        extra=body.extra or {},
        pxe_enabled=True if body.pxe_enabled is None else body.pxe_enabled,
        local_link_connection=body.local_link_connection or {},
        physical_network=body.physical_network,
        is_smartnic=bool(body.is_smartnic),
        description=body.description,
        vendor=body.vendor,
        category=body.category,
        portgroup=body.portgroup_uuid,
        available_for_dynamic_portgroup=body.available_for_dynamic_portgroup is not False,
    )


@router.post(
    "/ports",
    status_code=201,
    summary="Create a port",
    dependencies=[guard("baremetal:port:create", BODY)],
)
@wait_for_lock
def create_port(request: Request, body: PortCreate) -> JSONResponse:
    version = request_version(request)
    new = _new_port(body, version)
    port = port_service.create_port(services(request), new, version, caller=policy_caller(request))
    base = base_url(request)
    return JSONResponse(
        port_view(port, version, base),
        status_code=201,
        headers={"Location": f"{base}/v1/ports/{port.uuid}"},
    )


@router.patch(
    "/ports/{port_ident}",
    summary="Update a port with a JSON patch",
    dependencies=[guard("baremetal:port:update", PORT)],
)
@wait_for_lock
def patch_port(
    port_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    version = request_version(request)
    port = port_service.patch_port(
        services(request), port_ident, version, operations(patch), caller=policy_caller(request)
    )
    return JSONResponse(port_view(port, version, base_url(request)))


@router.delete(
    "/ports/{port_ident}",
    status_code=204,
    summary="Delete a port",
    dependencies=[guard("baremetal:port:delete", PORT)],
)
@wait_for_lock
def delete_port(port_ident: str, request: Request) -> Response:
    port_service.delete_port(services(request), port_ident, request_version(request))
    return Response(status_code=204)
