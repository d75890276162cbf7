"""``/v1/allocations`` (>=1.52): reserve an available node by resource class and traits.

Creating an allocation only records the request and queues its processing
in the same transaction (201, ``allocating``); a conductor picks the node
(``conductor.allocations``). Backfilling (``node``, >=1.58) records that an
already deployed node belongs to an allocation, synchronously. Deleting an
allocation frees its node in the same transaction.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Depends, Request, Response
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.api.auth.access import (
    allows,
    caller_of,
    forbidden,
    guard,
    project_scope,
    require,
    visible_node,
)
from metalforge.api.auth.policy import allocation_target
from metalforge.api.links import links
from metalforge.api.locking import wait_for_lock
from metalforge.api.params import Query, fields, keyset, page
from metalforge.api.patching import apply_patch
from metalforge.api.responses import JSONResponse
from metalforge.api.schemas import AllocationCreate, PatchOperation
from metalforge.api.services import base_url, services
from metalforge.api.validation import check_resource_class, check_trait
from metalforge.api.versions import Version, request_version
from metalforge.conductor import allocations, history
from metalforge.db.models import Allocation, AllocationTrait, Node, NodeTrait, utcnow
from metalforge.errors import (
    NodeLocked,
    RequestError,
    bad_request,
    conflict,
    not_acceptable,
    not_found,
)
from metalforge.services import lookup

router = APIRouter(tags=["allocations"])

SINCE: Version = (1, 52)
PATCH_SINCE: Version = (1, 57)
BACKFILL_SINCE: Version = (1, 58)
OWNER_SINCE: Version = (1, 60)
ALLOCATION_FIELDS: dict[str, Version] = {
    **dict.fromkeys(
        (
            "uuid",
            "name",
            "resource_class",
            "traits",
            "candidate_nodes",
            "state",
            "last_error",
            "node_uuid",
            "extra",
            "created_at",
            "updated_at",
            "links",
        ),
        SINCE,
    ),
    "owner": OWNER_SINCE,
}
SORTABLE = {"id", "uuid", "name", "resource_class", "state", "created_at", "updated_at"}
PATCHABLE = ("name", "extra")
LIST_PARAMS = ("fields", "node", "resource_class", "state", "owner")
_TOO_OLD = "The API version does not allow allocations"
CREATE = "baremetal:allocation:create"
CREATE_RESTRICTED = "baremetal:allocation:create_restricted"


def _gate_read(request: Request) -> None:
    """Below 1.52 the collection does not exist: 404, as for any unknown path."""
    if request_version(request) < SINCE:
        raise not_found(_TOO_OLD)


def _gate_write(request: Request) -> None:
    """Below 1.52 writes are 405, checked before the body is read."""
    if request_version(request) < SINCE:
        raise RequestError(405, _TOO_OLD)


def _gate_patch(request: Request) -> None:
    if request_version(request) < PATCH_SINCE:
        raise RequestError(405, "The API version does not allow updating allocations")


# -- views ----------------------------------------------------------------------


def allocation_view(
    allocation: Allocation,
    node_uuid: str | None,
    version: Version,
    base: str,
    wanted: list[str] | None = None,
) -> dict[str, Any]:
    """The JSON object; the node is shown as ``node_uuid`` (``node`` is write-only)."""
    names = wanted or [n for n, since in ALLOCATION_FIELDS.items() if since <= version]
    body: dict[str, Any] = {}
    for name in names:
        if name == "links":
            continue
        if name == "node_uuid":
            body[name] = node_uuid
        elif name == "traits":
            body[name] = [t.trait for t in allocation.traits]
        elif name == "candidate_nodes":
            body[name] = list(allocation.candidate_nodes or [])
        elif name in ("created_at", "updated_at"):
            value = getattr(allocation, name)
            body[name] = value.isoformat() if value else None
        else:
            body[name] = getattr(allocation, name)
    body["links"] = links(base, "allocations", allocation.uuid)
    return body


def _node_uuid(session: Session, allocation: Allocation) -> str | None:
    if allocation.node_id is None:
        return None
    return session.scalar(select(Node.uuid).where(Node.id == allocation.node_id))


def find_allocation(session: Session, ident: str) -> Allocation:
    """By UUID or by name; 404 otherwise."""
    allocation = session.scalar(select(Allocation).where(lookup.allocation_where(ident)))
    if allocation is None:
        raise lookup.allocation_not_found(ident)
    return allocation


# -- list / show ----------------------------------------------------------------


@router.get(
    "/allocations",
    summary="List allocations",
    dependencies=[guard("baremetal:allocation:list_all", "list")],
)
@router.get(
    "/allocations/",
    include_in_schema=False,
    dependencies=[guard("baremetal:allocation:list_all", "list")],
)
def list_allocations(request: Request) -> JSONResponse:
    _gate_read(request)
    svc = services(request)
    query = Query(request, [*LIST_PARAMS, "limit", "marker", "sort_key", "sort_dir"])
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE)
    wanted = fields(query, ALLOCATION_FIELDS)
    base = base_url(request)
    owner = query.get("owner", OWNER_SINCE)
    project = project_scope(request)
    if project is not None:
        # A caller limited to its project asks about another's allocations.
        if owner is not None and owner != project:
            raise forbidden("baremetal:allocation:list_all")
        owner = project
    with svc.db.read() as session:
        stmt = select(Allocation)
        if (ident := query.get("node")) is not None:
            node = visible_node(request, session, ident, query.version)
            if node is None:
                # Seed 004: a filter naming no node is a bad request, not a missing page.
                raise bad_request(f"Node {ident} could not be found.")
            stmt = stmt.where(Allocation.node_id == node.id)
        if (rc := query.get("resource_class")) is not None:
            stmt = stmt.where(Allocation.resource_class == check_resource_class(rc))
        if (state := query.get("state")) is not None:
            if state not in (allocations.ALLOCATING, allocations.ACTIVE, allocations.ERROR):
                raise bad_request(f"Invalid allocation state: {state}")
            stmt = stmt.where(Allocation.state == state)
        if owner is not None:
            stmt = stmt.where(Allocation.owner == owner)
        after: tuple[Any, int] | None = None
        if pg.marker:
            marker_query = select(Allocation).where(Allocation.uuid == pg.marker)
            if project is not None:
                marker_query = marker_query.where(Allocation.owner == project)
            marker = session.scalar(marker_query)
            if marker is None:
                raise bad_request(f"Marker {pg.marker} could not be found.")
            after = (getattr(marker, pg.sort_key), marker.id)
        stmt = keyset(stmt, getattr(Allocation, pg.sort_key), Allocation.id, pg, after)
        found = list(session.scalars(stmt))
        for allocation in found:  # as Ironic: every one listed must be readable
            require(request, "baremetal:allocation:get", allocation_target(allocation.owner))
        node_ids = [a.node_id for a in found if a.node_id is not None]
        uuids: dict[int, str] = {}
        if node_ids:
            rows = session.execute(select(Node.id, Node.uuid).where(Node.id.in_(node_ids)))
            uuids = {row[0]: row[1] for row in rows}
        items = [
            allocation_view(
                a, uuids.get(a.node_id) if a.node_id else None, query.version, base, wanted
            )
            for a in found
        ]
    body: dict[str, Any] = {"allocations": items}
    if len(found) == pg.limit:
        params = {k: v for k, v in query.params.items() if k != "marker"}
        params.update(limit=str(pg.limit), marker=found[-1].uuid)
        body["next"] = f"{base}/v1/allocations?{urlencode(params)}"
    return JSONResponse(body)


@router.get(
    "/allocations/{allocation_ident}",
    summary="Show an allocation",
    dependencies=[guard("baremetal:allocation:get", "allocation")],
)
def show_allocation(allocation_ident: str, request: Request) -> JSONResponse:
    _gate_read(request)
    svc = services(request)
    query = Query(request, ("fields",))
    wanted = fields(query, ALLOCATION_FIELDS)
    with svc.db.read() as session:
        allocation = find_allocation(session, allocation_ident)
        return JSONResponse(
            allocation_view(
                allocation,
                _node_uuid(session, allocation),
                query.version,
                base_url(request),
                wanted,
            )
        )


@router.get(
    "/nodes/{node_ident}/allocation",
    summary="Show a node's allocation",
    dependencies=[guard("baremetal:node:get", "node")],
)
def show_node_allocation(node_ident: str, request: Request) -> JSONResponse:
    _gate_read(request)
    svc = services(request)
    query = Query(request, ("fields",))
    wanted = fields(query, ALLOCATION_FIELDS)
    with svc.db.read() as session:
        node = lookup.find_node(session, node_ident, query.version)
        allocation = _readable_allocation_of(request, session, node)
        return JSONResponse(
            allocation_view(allocation, node.uuid, query.version, base_url(request), wanted)
        )


def _readable_allocation_of(request: Request, session: Session, node: Node) -> Allocation:
    """The node's allocation; one the caller may not read is answered as none."""
    allocation = _allocation_of(session, node)
    if not allows(request, "baremetal:allocation:get", allocation_target(allocation.owner)):
        raise _no_allocation(node)
    return allocation


def _no_allocation(node: Node) -> RequestError:
    return not_found(f"Node {node.uuid} is not associated with any allocation.")


def _allocation_of(session: Session, node: Node) -> Allocation:
    allocation = None
    if node.allocation_id is not None:
        allocation = session.get(Allocation, node.allocation_id)
    if allocation is None:
        if node.instance_uuid is not None:
            # Seed 004: reserved by hand (PATCH instance_uuid), not through an allocation.
            raise bad_request(
                f"Node {node.uuid} has instance_uuid {node.instance_uuid}, which does not "
                "belong to any allocation."
            )
        raise _no_allocation(node)
    return allocation


# -- create ---------------------------------------------------------------------


def _resolve_candidates(
    session: Session, names: list[str], version: Version, project: str | None
) -> list[str]:
    """Candidate nodes as UUIDs; an unknown one is a 400 (the request cannot be met as asked).

    With ``project``, only the nodes it owns or leases can be named (Ironic's
    rule for callers without ``create_restricted``); others are unknown.
    """
    resolved: list[str] = []
    for ident in names:
        try:
            node = lookup.find_node(session, ident, version)
        except RequestError:
            raise bad_request(f"Candidate node {ident} could not be found.") from None
        if project is not None and project not in (node.owner, node.lessee):
            raise bad_request(f"Candidate node {ident} could not be found.")
        if node.uuid not in resolved:
            resolved.append(node.uuid)
    return resolved


def _check_body(body: AllocationCreate, version: Version) -> tuple[list[str], str]:
    """Checks that need no database: the traits and the allocation's UUID."""
    if body.node is not None and version < BACKFILL_SINCE:
        raise bad_request("Backfilling allocations (node) needs API version 1.58 or newer.")
    if body.owner is not None and version < OWNER_SINCE:
        raise not_acceptable("Field owner is not available before API version 1.60")
    if body.resource_class is None and body.node is None:
        raise bad_request("The resource_class field is mandatory when not backfilling.")
    if body.resource_class is not None:
        check_resource_class(body.resource_class)
    if body.name is not None:
        lookup.check_name(body.name)
    traits = list(dict.fromkeys(check_trait(t) for t in body.traits or []))
    allocation_uuid = lookup.check_uuid(body.uuid) if body.uuid else ""
    return traits, allocation_uuid


def _check_unique(session: Session, allocation_uuid: str, name: str | None) -> None:
    taken = select(Allocation.id).where(Allocation.uuid == allocation_uuid)
    if session.scalar(taken) is not None:
        raise conflict(f"An allocation with UUID {allocation_uuid} already exists.")
    if session.scalar(select(Node.id).where(Node.instance_uuid == allocation_uuid)) is not None:
        raise conflict(
            f"An allocation with UUID {allocation_uuid} cannot be created: "
            "a node's instance_uuid already has that value."
        )
    if name is not None and session.scalar(select(Allocation.id).where(Allocation.name == name)):
        raise conflict(f"An allocation with name {name} already exists.")


def _backfill(
    request: Request,
    session: Session,
    body: AllocationCreate,
    traits: list[str],
    allocation: Allocation,
    version: Version,
) -> Node:
    """Attach an already deployed node to ``allocation`` (checked, then written fenced)."""
    assert body.node is not None
    node = visible_node(request, session, body.node, version)
    if node is None:  # missing or hidden: the request cannot be met as asked
        raise bad_request(f"Node {body.node} could not be found.")
    if node.reservation is not None:
        raise NodeLocked(node.uuid, node.reservation)
    if node.provision_state != states.ACTIVE:
        raise bad_request(
            f"Cannot create an allocation with node {node.uuid} in provision state "
            f"{node.provision_state}: backfilling needs an active node."
        )
    if node.allocation_id is not None:
        raise conflict(f"Node {node.uuid} already has an allocation.")
    req = allocations.Request(
        id=0,
        uuid=allocation.uuid,
        name=allocation.name,
        resource_class=allocation.resource_class,
        traits=tuple(traits),
        candidate_nodes=tuple(allocation.candidate_nodes),
        owner=allocation.owner,
    )
    node_traits = set(session.scalars(select(NodeTrait.trait).where(NodeTrait.node_id == node.id)))
    why = allocations.node_matches(node, req, node_traits)
    if why is not None:
        raise bad_request(f"Node {node.uuid} cannot be backfilled into this allocation: {why}.")
    return node


@router.post(
    "/allocations",
    status_code=201,
    summary="Create an allocation",
    dependencies=[Depends(_gate_write), guard("baremetal:allocation:create", "body")],
)
@wait_for_lock
def create_allocation(request: Request, body: AllocationCreate) -> JSONResponse:
    svc = services(request)
    version = request_version(request)
    owner = _authorize_create(request, body.owner)
    traits, allocation_uuid = _check_body(body, version)
    base = base_url(request)
    # Without create_restricted a caller may only name its project's nodes.
    project = None if allows(request, CREATE_RESTRICTED) else caller_of(request).project_id
    try:
        with svc.db.write() as session:
            names = body.candidate_nodes or []
            candidates = _resolve_candidates(session, names, version, project)
            allocation = Allocation(
                uuid=allocation_uuid,
                name=body.name,
                resource_class=body.resource_class,
                candidate_nodes=candidates,
                state=allocations.ALLOCATING,
                owner=owner,
                extra=body.extra or {},
                traits=[AllocationTrait(trait=t) for t in traits],
            )
            node = None
            if body.node is not None:
                node = _backfill(request, session, body, traits, allocation, version)
                if not allocation.uuid:
                    allocation.uuid = node.instance_uuid or str(uuidlib.uuid4())
                elif node.instance_uuid not in (None, allocation.uuid):
                    raise bad_request(
                        f"Node {node.uuid} already has instance_uuid {node.instance_uuid}, "
                        f"which differs from the allocation's UUID {allocation.uuid}."
                    )
                if allocation.resource_class is None:
                    allocation.resource_class = node.resource_class
                allocation.state = allocations.ACTIVE
                allocation.node_id = node.id
            else:
                allocation.uuid = allocation.uuid or str(uuidlib.uuid4())
            if node is None or allocation.uuid != node.instance_uuid:
                _check_unique(session, allocation.uuid, allocation.name)
            elif allocation.name is not None:
                taken = select(Allocation.id).where(Allocation.name == allocation.name)
                if session.scalar(taken):
                    raise conflict(f"An allocation with name {allocation.name} already exists.")
            session.add(allocation)
            session.flush()
            if node is not None:
                _attach(session, node, allocation)
            else:
                allocations.enqueue(session, allocation.id)
            view = allocation_view(allocation, node.uuid if node else None, version, base)
    except IntegrityError:  # a concurrent request won the race for the name or UUID
        raise conflict("An allocation with this name or UUID already exists.") from None
    svc.notify()
    return JSONResponse(
        view, status_code=201, headers={"Location": f"{base}/v1/allocations/{view['uuid']}"}
    )


def _authorize_create(request: Request, owner: str | None) -> str | None:
    """Ironic's checks for creating an allocation; the owner it is created with.

    ``create`` (any member) or, failing that, ``create_restricted`` for the
    caller's own project. A caller that is not system-scoped creates for its
    own project: a different ``owner`` needs ``create_restricted``, none
    given means its project.
    """
    caller = caller_of(request)
    project = caller.project_id
    if not allows(request, CREATE):
        if project and owner and owner != project:
            raise forbidden(CREATE)
        require(request, CREATE_RESTRICTED)
        owner = project
    if not caller.system_scoped:
        if not owner:
            owner = project
        elif owner != project and not allows(request, CREATE_RESTRICTED):
            raise RequestError(
                403,
                f"Cannot create allocation with an owner Project ID value {owner} not "
                f"matching the requester Project ID {project}. Policy {CREATE_RESTRICTED} "
                "is required for this capability.",
            )
    return owner


def _attach(session: Session, node: Node, allocation: Allocation) -> None:
    result = session.execute(
        update(Node)
        .where(Node.id == node.id, Node.epoch == node.epoch, Node.reservation.is_(None))
        .values(instance_uuid=allocation.uuid, allocation_id=allocation.id, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise conflict(f"Node {node.uuid} changed while it was being backfilled; please retry.")
    history.record(
        session,
        node.id,
        "allocation",
        f"backfilled into allocation {allocation.uuid}",
        state=node.provision_state,
        target=node.target_provision_state,
    )


# -- patch ----------------------------------------------------------------------


@router.patch(
    "/allocations/{allocation_ident}",
    summary="Update an allocation's name or extra",
    dependencies=[
        Depends(_gate_write),
        Depends(_gate_patch),
        guard("baremetal:allocation:update", "allocation"),
    ],
)
def patch_allocation(
    allocation_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    svc = services(request)
    version = request_version(request)
    for op in patch:
        root = op.path.lstrip("/").split("/", 1)[0]
        if root not in PATCHABLE:
            raise bad_request(
                f"Cannot patch {op.path}. Only the following can be updated: {', '.join(PATCHABLE)}"
            )
    try:
        with svc.db.write() as session:
            allocation = find_allocation(session, allocation_ident)
            doc = {"name": allocation.name, "extra": allocation.extra}
            after = apply_patch(doc, patch)
            name, extra = after.get("name"), after.get("extra") or {}
            if name is not None:
                if not isinstance(name, str):
                    raise bad_request("Invalid value for name: must be a string")
                lookup.check_name(name)
            if not isinstance(extra, dict):
                raise bad_request("Invalid value for extra: must be a JSON object")
            taken = select(Allocation.id).where(Allocation.name == name)
            if name is not None and name != allocation.name and session.scalar(taken):
                raise conflict(f"An allocation with name {name} already exists.")
            allocation.name = name
            allocation.extra = extra
            allocation.updated_at = utcnow()
            session.flush()
            view = allocation_view(
                allocation, _node_uuid(session, allocation), version, base_url(request)
            )
    except IntegrityError:
        raise conflict("An allocation with that name already exists.") from None
    return JSONResponse(view)


# -- delete ---------------------------------------------------------------------


def deallocate(session: Session, allocation: Allocation) -> None:
    """Free the allocation's node and delete the allocation, in the caller's transaction.

    Refused while the node is deployed or in a state that allows no update
    (seed 004), unless it is in maintenance: that is how an operator cleans
    up by hand.
    """
    if allocation.node_id is not None:
        node = session.get(Node, allocation.node_id)
        if node is not None:
            held = states.keeps_its_allocation(node.provision_state, node.target_provision_state)
            if held and not node.maintenance:
                raise conflict(
                    f"Cannot remove allocation {allocation.uuid} from node {node.uuid} in "
                    f"provision state {node.provision_state}; undeploy the node or set it "
                    "into maintenance mode first."
                )
            if node.reservation is not None:
                raise NodeLocked(node.uuid, node.reservation)
            result = session.execute(
                update(Node)
                .where(
                    Node.id == node.id,
                    Node.epoch == node.epoch,
                    Node.reservation.is_(None),
                    Node.allocation_id == allocation.id,
                )
                .values(instance_uuid=None, allocation_id=None, updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise conflict(f"Node {node.uuid} changed while it was being freed; please retry.")
            history.record(
                session,
                node.id,
                "allocation",
                f"allocation {allocation.uuid} deleted; the node is free",
                state=node.provision_state,
                target=node.target_provision_state,
            )
    allocations.delete_allocation(session, allocation.id)


@router.delete(
    "/allocations/{allocation_ident}",
    status_code=204,
    summary="Delete an allocation, freeing its node",
    dependencies=[Depends(_gate_write), guard("baremetal:allocation:delete", "allocation")],
)
@wait_for_lock
def delete_allocation(allocation_ident: str, request: Request) -> Response:
    svc = services(request)
    with svc.db.write() as session:
        deallocate(session, find_allocation(session, allocation_ident))
    return Response(status_code=204)


@router.delete(
    "/nodes/{node_ident}/allocation",
    status_code=204,
    summary="Delete a node's allocation",
    dependencies=[Depends(_gate_write), guard("baremetal:node:get", "node")],
)
@wait_for_lock
def delete_node_allocation(node_ident: str, request: Request) -> Response:
    svc = services(request)
    with svc.db.write() as session:
        node = lookup.find_node(session, node_ident, request_version(request))
        allocation = _readable_allocation_of(request, session, node)
        require(request, "baremetal:allocation:delete", allocation_target(allocation.owner))
        deallocate(session, allocation)
    return Response(status_code=204)
