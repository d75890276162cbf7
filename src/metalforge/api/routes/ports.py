"""``/v1/ports``: the node's network ports, matched by MAC on agent lookup."""

from __future__ import annotations

import re
import uuid as uuidlib
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge.api.auth.access import guard, project_scope, require, visible_node
from metalforge.api.auth.policy import node_target
from metalforge.api.links import links
from metalforge.api.params import Query, fields, keyset, page, parse_bool
from metalforge.api.patching import apply_patch
from metalforge.api.schemas import PatchOperation, PortCreate, max_lengths
from metalforge.api.services import base_url, services
from metalforge.api.versions import Version, fmt, request_version
from metalforge.db.models import Node, Port, utcnow
from metalforge.errors import bad_request, conflict, not_acceptable
from metalforge.services import lookup

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
}
LIST_DEFAULT = ("uuid", "address")
PATCHABLE = {
    "address",
    "node_uuid",
    "extra",
    "pxe_enabled",
    "local_link_connection",
    "physical_network",
    "is_smartnic",
    "name",
    "description",
    "vendor",
    "category",
    "portgroup_uuid",
}
MAX_LENGTHS = max_lengths(PortCreate)
"""PATCH holds strings to the limits create does (and the columns need)."""
_MAC = re.compile(r"^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$")


def normalise_mac(address: str) -> str:
    mac = address.strip().lower()
    if not _MAC.match(mac):
        raise bad_request(f"Expected a MAC address but received {address}.")
    return mac.replace("-", ":")


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
            body[name] = None
        elif name in ("created_at", "updated_at"):
            value = getattr(port, name)
            body[name] = value.isoformat() if value else None
        else:
            body[name] = getattr(port, name)
    body["links"] = links(base, "ports", port.uuid)
    return body


def _find_port(session: Session, ident: str, version: Version) -> Port:
    port = session.scalar(select(Port).where(lookup.port_where(ident, version)))
    if port is None:
        raise lookup.port_not_found(ident)
    return port


def _list(request: Request, detail_path: bool) -> dict[str, Any]:
    svc = services(request)
    allowed = [
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
    ]
    if not detail_path:
        allowed += ["fields", "detail"]
    query = Query(request, allowed)
    sortable = {"id", "uuid", "address", "created_at", "updated_at", "name", "pxe_enabled"}
    pg = page(query, svc.settings.api.max_limit, sortable=sortable)
    wanted = fields(query, PORT_FIELDS) if not detail_path else None
    detail = detail_path or bool(query.bool("detail", (1, 43)))
    if wanted is not None and detail:
        raise bad_request("Can not specify ?detail=True and fields in the same request.")
    if wanted is None and not detail:
        wanted = list(LIST_DEFAULT)
    base = base_url(request)
    project = project_scope(request)
    with svc.db.read() as session:
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
        if (address := query.get("address")) is not None:
            stmt = stmt.where(Port.address == address.lower())
        if (text := query.get("description_contains")) is not None:
            stmt = stmt.where(Port.description.contains(text, autoescape=True))
        if shard is not None:
            stmt = stmt.where(Node.shard.in_([s.strip() for s in shard.split(",")]))
        after: tuple[Any, int] | None = None
        if pg.marker:
            marker_query = select(Port).where(Port.uuid == pg.marker)
            if project is not None:
                marker_query = marker_query.join(Node, Node.id == Port.node_id).where(
                    lookup.held_by(project)
                )
            marker = session.scalar(marker_query)
            if marker is None:
                raise bad_request(f"Marker {pg.marker} could not be found.")
            after = (getattr(marker, pg.sort_key), marker.id)
        stmt = keyset(stmt, getattr(Port, pg.sort_key), Port.id, pg, after)
        ports = list(session.scalars(stmt))
        items = [port_view(p, query.version, base, wanted) for p in ports]
    body: dict[str, Any] = {"ports": items}
    if len(ports) == pg.limit:
        params = {k: v for k, v in query.params.items() if k != "marker"}
        params.update(limit=str(pg.limit), marker=ports[-1].uuid)
        path = "ports/detail" if detail_path else "ports"
        body["next"] = f"{base}/v1/{path}?{urlencode(params)}"
    return body


@router.get("/ports", summary="List ports", dependencies=[guard("baremetal:port:list_all", "list")])
@router.get(
    "/ports/", include_in_schema=False, dependencies=[guard("baremetal:port:list_all", "list")]
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
    dependencies=[guard("baremetal:port:list_all", "list")],
)
def list_ports_detail(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, True))


@router.get(
    "/ports/{port_ident}", summary="Show a port", dependencies=[guard("baremetal:port:get", "port")]
)
def show_port(port_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["fields"])
    wanted = fields(query, PORT_FIELDS)
    with svc.db.read() as session:
        port = _find_port(session, port_ident, query.version)
        return JSONResponse(port_view(port, query.version, base_url(request), wanted))


def _gate(names: set[str], version: Version) -> None:
    for name in sorted(names):
        since = PORT_FIELDS.get(name) or ((1, 94) if name == "node_ident" else None)
        if since is not None and version < since:
            raise not_acceptable(f"Field {name} is not available at API version {fmt(version)}")


@router.post(
    "/ports",
    status_code=201,
    summary="Create a port",
    dependencies=[guard("baremetal:port:create", "body")],
)
def create_port(request: Request, body: PortCreate) -> JSONResponse:
    svc = services(request)
    version = request_version(request)
    given = body.model_dump(exclude_unset=True)
    _gate(set(given), version)
    if (body.node_uuid is None) == (body.node_ident is None):
        raise bad_request("Exactly one of node_uuid and node_ident is required")
    if body.portgroup_uuid is not None:
        raise bad_request("Port groups are not supported by this service")
    if body.name is not None:
        lookup.check_name(body.name)
    address = normalise_mac(body.address)
    port_uuid = lookup.check_uuid(body.uuid) if body.uuid else str(uuidlib.uuid4())
    try:
        with svc.db.write() as session:
            ident = str(body.node_uuid or body.node_ident)
            # As Ironic: the rule is checked on the node (none when it is
            # missing or hidden) before a missing node is reported, so that a
            # project learns nothing of nodes it may not see.
            node = visible_node(request, session, ident, version)
            target = node_target(node.owner, node.lessee) if node else node_target(None, None)
            require(request, "baremetal:port:create", target)
            if node is None:
                raise bad_request(f"Node {ident} could not be found.")
            port = Port(
                uuid=port_uuid,
                address=address,
                node_id=node.id,
                name=body.name,
                extra=body.extra or {},
                pxe_enabled=True if body.pxe_enabled is None else body.pxe_enabled,
                local_link_connection=body.local_link_connection or {},
                physical_network=body.physical_network,
                is_smartnic=bool(body.is_smartnic),
                description=body.description,
                vendor=body.vendor,
                category=body.category,
                internal_info={},
            )
            session.add(port)
            session.flush()
            session.refresh(port)
            view = port_view(port, version, base_url(request))
    except IntegrityError as exc:
        text = str(exc.orig).lower()
        if "address" in text:
            raise conflict(f"A port with MAC address {address} already exists.") from None
        if "name" in text:
            raise conflict(f"A port with name {body.name} already exists.") from None
        raise conflict(f"A port with UUID {port_uuid} already exists.") from None
    return JSONResponse(
        view, status_code=201, headers={"Location": f"{base_url(request)}/v1/ports/{port_uuid}"}
    )


@router.patch(
    "/ports/{port_ident}",
    summary="Update a port with a JSON patch",
    dependencies=[guard("baremetal:port:update", "port")],
)
def patch_port(
    port_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    svc = services(request)
    version = request_version(request)
    for op in patch:
        root = op.path.lstrip("/").split("/", 1)[0]
        if root not in PATCHABLE:
            raise bad_request(
                f"Cannot patch {op.path}. Only the following can be updated: "
                f"{', '.join(sorted(PATCHABLE))}"
            )
        _gate({root}, version)
    try:
        with svc.db.write() as session:
            port = _find_port(session, port_ident, version)
            doc = {
                name: getattr(port, name) for name in PATCHABLE - {"node_uuid", "portgroup_uuid"}
            }
            doc["node_uuid"] = port.node.uuid
            doc["portgroup_uuid"] = None
            after = apply_patch(doc, patch)
            values: dict[str, Any] = {}
            for name in ("extra", "local_link_connection"):
                value = after.get(name) or {}
                if not isinstance(value, dict):
                    raise bad_request(f"Invalid value for {name}: must be a JSON object")
                values[name] = value
            values["address"] = normalise_mac(str(after.get("address") or ""))
            for name in ("physical_network", "name", "description", "vendor", "category"):
                value = after.get(name)
                if value is not None and not isinstance(value, str):
                    raise bad_request(f"Invalid value for {name}: must be a string")
                if value is not None and len(value) > MAX_LENGTHS[name]:
                    raise bad_request(
                        f"Invalid value for {name}: at most {MAX_LENGTHS[name]} "
                        "characters are allowed"
                    )
                values[name] = value
            if values["name"] is not None:
                lookup.check_name(values["name"])
            for name, default in (("pxe_enabled", True), ("is_smartnic", False)):
                value = after.get(name, default)
                if isinstance(value, str):
                    # ironicclient sends "True"/"False" (`port set --pxe-enabled`).
                    value = parse_bool(name, value)
                if value is None:
                    value = default
                if not isinstance(value, bool):
                    raise bad_request(f"Invalid value for {name}: must be a boolean")
                values[name] = value
            node_uuid = after.get("node_uuid")
            if node_uuid != port.node.uuid:
                # As on create: a port must belong to an existing node, so a
                # missing or unknown one is a bad request, not a missing port.
                if not isinstance(node_uuid, str):
                    raise bad_request("Invalid value for node_uuid: a port needs a node")
                target = visible_node(request, session, node_uuid, version)
                if target is None:
                    # Missing and hidden alike: nothing said about its existence.
                    raise bad_request(f"Node {node_uuid} could not be found.")
                if target.owner != port.node.owner:
                    # As Ironic (for every caller): a port only moves between
                    # nodes of the same owner.
                    raise bad_request(
                        f"Unable to apply the requested node_uuid '{node_uuid}'. "
                        "Requested value was invalid."
                    )
                values["node_id"] = target.id
            session.execute(
                update(Port).where(Port.id == port.id).values(**values, updated_at=utcnow())
            )
            session.flush()
            session.refresh(port)
            return JSONResponse(port_view(port, version, base_url(request)))
    except IntegrityError:
        raise conflict("A port with that MAC address or name already exists.") from None


@router.delete(
    "/ports/{port_ident}",
    status_code=204,
    summary="Delete a port",
    dependencies=[guard("baremetal:port:delete", "port")],
)
def delete_port(port_ident: str, request: Request) -> Response:
    svc = services(request)
    with svc.db.write() as session:
        port = _find_port(session, port_ident, request_version(request))
        session.execute(delete(Port).where(Port.id == port.id))
    return Response(status_code=204)
