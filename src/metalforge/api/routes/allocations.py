"""``/v1/allocations`` (>=1.52): reserve an available node by resource class and traits.

Creating an allocation only records the request and queues its processing
in the same transaction (201, ``allocating``); a conductor picks the node
(``conductor.allocation_work``). Backfilling (``node``, >=1.58) records that an
already deployed node belongs to an allocation, synchronously. Deleting an
allocation frees its node in the same transaction.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Request, Response
from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from metalforge.api import listing
from metalforge.api.auth.access import (
    ALLOCATION,
    BODY,
    LIST,
    NODE,
    actor,
    allows,
    guard,
    identity_of,
    policy_caller,
    project_scope,
    require,
    visible_node,
)
from metalforge.api.auth.policy import allocation_target
from metalforge.api.gates import refused_before
from metalforge.api.links import links
from metalforge.api.locking import wait_for_lock
from metalforge.api.params import Query, fields, page
from metalforge.api.responses import JSONResponse
from metalforge.api.schemas import AllocationCreate, PatchOperation, operations
from metalforge.api.versions import Version, request_version
from metalforge.api.wiring import base_url, services
from metalforge.db.models import Allocation, Node
from metalforge.errors import RequestError, bad_request, not_found
from metalforge.services import allocations
from metalforge.services.allocations import AllocationRecord
from metalforge.services.caller import denied
from metalforge.services.values import check_resource_class

router = APIRouter(tags=["allocations"])

SINCE: Version = (1, 52)
PATCH_SINCE: Version = (1, 57)
OWNER_SINCE: Version = allocations.OWNER_SINCE
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
LIST_PARAMS = ("fields", "node", "resource_class", "state", "owner")
_TOO_OLD = "The API version does not allow allocations"
CREATE = "baremetal:allocation:create"
CREATE_RESTRICTED = "baremetal:allocation:create_restricted"


def _gate_read(request: Request) -> None:
    """Below 1.52 the collection does not exist: 404, as for any unknown path."""
    if request_version(request) < SINCE:
        raise not_found(_TOO_OLD)


_WRITE = refused_before(SINCE, _TOO_OLD)
"""Below 1.52 writes are 405, checked before the body is read."""


def _gate_patch(request: Request) -> None:
    if request_version(request) < PATCH_SINCE:
        raise RequestError(405, "The API version does not allow updating allocations")


# -- views ----------------------------------------------------------------------


def allocation_view(
    allocation: AllocationRecord,
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
        if name in ("traits", "candidate_nodes"):
            body[name] = list(getattr(allocation, name))
        elif name in ("created_at", "updated_at"):
            value = getattr(allocation, name)
            body[name] = value.isoformat() if value else None
        else:
            body[name] = getattr(allocation, name)
    body["links"] = links(base, "allocations", allocation.uuid)
    return body


# -- list / show ----------------------------------------------------------------


@router.get(
    "/allocations",
    summary="List allocations",
    dependencies=[guard("baremetal:allocation:list_all", LIST)],
)
@router.get(
    "/allocations/",
    include_in_schema=False,
    dependencies=[guard("baremetal:allocation:list_all", LIST)],
)
def list_allocations(request: Request) -> JSONResponse:
    _gate_read(request)
    svc = services(request)
    query = Query(request, [*LIST_PARAMS, "limit", "marker", "sort_key", "sort_dir"])
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE)
    wanted = fields(query, ALLOCATION_FIELDS)
    base = base_url(request)
    project = project_scope(request)
    owner = _owner_filter(query, project)
    with svc.db.read() as session:
        stmt = _filtered(request, session, query, owner)
        stmt = listing.paged(stmt, session, Allocation, pg, _project_scope(project))
        found = list(session.scalars(stmt))
        for allocation in found:  # as Ironic: every one listed must be readable
            require(request, "baremetal:allocation:get", allocation_target(allocation.owner))
        items = [allocation_view(r, query.version, base, wanted) for r in _records(session, found)]
    last = found[-1].uuid if found else None
    page_link = listing.next_link(base, "allocations", query, pg, len(found), last)
    return JSONResponse({"allocations": items, **page_link})


def _owner_filter(query: Query, project: str | None) -> str | None:
    """The ``owner`` filter; a caller limited to its project sees only that project's."""
    owner = query.get("owner", OWNER_SINCE)
    if project is None:
        return owner
    if owner is not None and owner != project:
        # A caller limited to its project asks about another's allocations.
        raise denied("baremetal:allocation:list_all")
    return project


def _filtered(
    request: Request, session: Session, query: Query, owner: str | None
) -> Select[Allocation]:
    """The allocations the filters select, each filter checked as it is read."""
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
        if state not in allocations.STATES:
            raise bad_request(f"Invalid allocation state: {state}")
        stmt = stmt.where(Allocation.state == state)
    if owner is not None:
        stmt = stmt.where(Allocation.owner == owner)
    return stmt


def _project_scope(project: str | None) -> listing.Scope | None:
    """A caller limited to its project pages through that project's allocations only."""
    if project is None:
        return None
    return lambda q: q.where(Allocation.owner == project)


def _records(session: Session, found: list[Allocation]) -> list[AllocationRecord]:
    """The page's allocations with their nodes' UUIDs, read in one statement."""
    node_ids = [a.node_id for a in found if a.node_id is not None]
    uuids: dict[int, str] = {}
    if node_ids:
        rows = session.execute(select(Node.id, Node.uuid).where(Node.id.in_(node_ids)))
        uuids = {row[0]: row[1] for row in rows}
    return [AllocationRecord.of(a, uuids.get(a.node_id) if a.node_id else None) for a in found]


@router.get(
    "/allocations/{allocation_ident}",
    summary="Show an allocation",
    dependencies=[guard("baremetal:allocation:get", ALLOCATION)],
)
def show_allocation(allocation_ident: str, request: Request) -> JSONResponse:
    _gate_read(request)
    query = Query(request, ("fields",))
    wanted = fields(query, ALLOCATION_FIELDS)
    record = allocations.show_allocation(services(request), allocation_ident)
    return JSONResponse(allocation_view(record, query.version, base_url(request), wanted))


@router.get(
    "/nodes/{node_ident}/allocation",
    summary="Show a node's allocation",
    dependencies=[guard("baremetal:node:get", NODE, missing_status=400)],
)
def show_node_allocation(node_ident: str, request: Request) -> JSONResponse:
    _gate_read(request)
    query = Query(request, ("fields",))
    wanted = fields(query, ALLOCATION_FIELDS)
    record = allocations.show_node_allocation(
        services(request), node_ident, query.version, caller=policy_caller(request)
    )
    return JSONResponse(allocation_view(record, query.version, base_url(request), wanted))


# -- create ---------------------------------------------------------------------


@router.post(
    "/allocations",
    status_code=201,
    summary="Create an allocation",
    dependencies=[_WRITE, guard("baremetal:allocation:create", BODY)],
)
@wait_for_lock
def create_allocation(request: Request, body: AllocationCreate) -> JSONResponse:
    version = request_version(request)
    grant = _grant(request, _authorize_create(request, body.owner))
    new = allocations.NewAllocation(
        resource_class=body.resource_class,
        traits=body.traits or (),
        candidate_nodes=body.candidate_nodes or (),
        name=body.name,
        uuid=body.uuid,
        extra=body.extra or {},
        owner=body.owner,
        node=body.node,
    )
    record = allocations.create_allocation(
        services(request), new, version, grant, caller=policy_caller(request), actor=actor(request)
    )
    base = base_url(request)
    return JSONResponse(
        allocation_view(record, version, base),
        status_code=201,
        headers={"Location": f"{base}/v1/allocations/{record.uuid}"},
    )


def _authorize_create(request: Request, owner: str | None) -> str | None:
    """Ironic's checks for creating an allocation; the owner it is created with.

    ``create`` (any member) or, failing that, ``create_restricted`` for the
    caller's own project. A caller that is not system-scoped creates for its
    own project: a different ``owner`` needs ``create_restricted``, none
    given means its project.
    """
    caller = identity_of(request)
    project = caller.project_id
    if not allows(request, CREATE):
        if project and owner and owner != project:
            raise denied(CREATE)
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


def _grant(request: Request, owner: str | None) -> allocations.Grant:
    """The owner to create with, and which nodes the caller may name as candidates."""
    # Without create_restricted a caller may only name its project's nodes.
    project = None if allows(request, CREATE_RESTRICTED) else identity_of(request).project_id
    return allocations.Grant(owner=owner, project=project)


# -- patch ----------------------------------------------------------------------


@router.patch(
    "/allocations/{allocation_ident}",
    summary="Update an allocation's name or extra",
    dependencies=[
        _WRITE,
        Depends(_gate_patch),
        guard("baremetal:allocation:update", ALLOCATION),
    ],
)
def patch_allocation(
    allocation_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    version = request_version(request)
    record = allocations.update_allocation(
        services(request), allocation_ident, version, operations(patch)
    )
    return JSONResponse(allocation_view(record, version, base_url(request)))


# -- delete ---------------------------------------------------------------------


@router.delete(
    "/allocations/{allocation_ident}",
    status_code=204,
    summary="Delete an allocation, freeing its node",
    dependencies=[_WRITE, guard("baremetal:allocation:delete", ALLOCATION)],
)
@wait_for_lock
def delete_allocation(allocation_ident: str, request: Request) -> Response:
    allocations.delete_allocation(services(request), allocation_ident, actor=actor(request))
    return Response(status_code=204)


@router.delete(
    "/nodes/{node_ident}/allocation",
    status_code=204,
    summary="Delete a node's allocation",
    dependencies=[_WRITE, guard("baremetal:node:get", NODE)],
)
@wait_for_lock
def delete_node_allocation(node_ident: str, request: Request) -> Response:
    allocations.delete_node_allocation(
        services(request),
        node_ident,
        request_version(request),
        caller=policy_caller(request),
        actor=actor(request),
    )
    return Response(status_code=204)
