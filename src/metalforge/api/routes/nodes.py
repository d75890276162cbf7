"""``/v1/nodes``: create, list, show, patch, delete."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Body, Request, Response
from sqlalchemy import JSON, Row, select
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.api import listing
from metalforge.api.auth import access
from metalforge.api.auth.access import (
    BODY,
    LIST,
    NODE,
    NODE_LIST,
    actor,
    allows,
    guard,
    identity_of,
    node_disclosure,
    policy_caller,
    project_scope,
    require,
)
from metalforge.api.auth.policy import node_target
from metalforge.api.locking import wait_for_lock
from metalforge.api.node_view import (
    SELECTABLE_FIELDS,
    ViewPlan,
    node_view,
    render,
    view_plan,
)
from metalforge.api.params import Page, Query, fields, page
from metalforge.api.responses import JSONResponse
from metalforge.api.schemas import PatchOperation, operations
from metalforge.api.versions import Version, fmt, request_version
from metalforge.api.wiring import ApiServices, base_url, read_only, services
from metalforge.db.models import Node
from metalforge.errors import bad_request, not_acceptable
from metalforge.services import lookup, nodes
from metalforge.services.bodies import NodeCreate
from metalforge.services.caller import denied
from metalforge.services.node_fields import NODE_FIELDS
from metalforge.services.node_patch import rules_for_values

router = APIRouter(tags=["nodes"])

LIST_FILTERS: dict[str, Version] = {
    "associated": (1, 1),
    "maintenance": (1, 1),
    "chassis_uuid": (1, 1),
    "instance_uuid": (1, 1),
    "provision_state": (1, 9),
    "driver": (1, 16),
    "resource_class": (1, 21),
    "fault": (1, 42),
    "conductor_group": (1, 46),
    "conductor": (1, 49),
    "owner": (1, 50),
    "lessee": (1, 65),
    "shard": (1, 82),
    "sharded": (1, 82),
    "include_children": (1, 83),
    "parent_node": (1, 83),
    "instance_name": (1, 104),
    "retired": (1, 1),
    "description_contains": (1, 1),
    "project": (1, 1),
}
PAGING = ("limit", "marker", "sort_key", "sort_dir")
UNSORTABLE = {c.key for c in Node.__table__.columns if isinstance(c.type, JSON)} | {"traits"}
"""Documents (a running step, ``driver_info``...) and the trait list have no order: a
``sort_key`` naming one is refused, as Ironic refuses it, whichever column is added."""
SORTABLE = {c.key for c in Node.__table__.columns} - UNSORTABLE - {"epoch"}
FAULTS = {"power failure", "clean failure", "rescue abort failure", "service failure"}

# -- listing ------------------------------------------------------------------


EQUALITY_FILTERS = (
    "chassis_uuid",
    "instance_uuid",
    "driver",
    "resource_class",
    "owner",
    "lessee",
    "instance_name",
    "parent_node",
)


def _filters(query: Query, svc: ApiServices, session: Session, scope: str | None) -> list[Any]:
    """The list's conditions, each filter checked as it is read."""
    for name, since in LIST_FILTERS.items():
        query.get(name, since)  # a filter newer than the request's version is a 406
    conditions = [*_scope_filter(query, scope), *_flag_filters(query), *_value_filters(query)]
    if query.get("parent_node") is None and not query.bool("include_children"):
        conditions.append(Node.parent_node.is_(None))
    if (s := query.get("conductor")) is not None:
        conductor_of = svc.conductor_lookup()  # one ring per (driver, group), not per node
        owned = [n.id for n in session.scalars(select(Node)) if conductor_of(n) == s]
        conditions.append(Node.id.in_(owned))
    return conditions


def _scope_filter(query: Query, scope: str | None) -> list[Any]:
    """A project-scoped caller sees the nodes its project owns or leases."""
    if scope is None:
        return []
    if query.get("project") not in (None, scope):
        raise denied("baremetal:node:list_all")
    return [lookup.held_by(scope)]


def _flag_filters(query: Query) -> list[Any]:
    conditions: list[Any] = []
    if (v := query.bool("associated")) is not None:
        conditions.append(Node.instance_uuid.is_not(None) if v else Node.instance_uuid.is_(None))
    if (v := query.bool("maintenance")) is not None:
        conditions.append(Node.maintenance.is_(v))
    if (v := query.bool("retired")) is not None:
        conditions.append(Node.retired.is_(v))
    if (v := query.bool("sharded")) is not None:
        conditions.append(Node.shard.is_not(None) if v else Node.shard.is_(None))
    return conditions


def _value_filters(query: Query) -> list[Any]:
    conditions: list[Any] = []
    if (s := query.get("provision_state")) is not None:
        if s not in states.STATES:
            raise bad_request(f"Invalid provision state: {s}")
        conditions.append(Node.provision_state == s)
    if (s := query.get("fault")) is not None:
        if s not in FAULTS:
            raise bad_request(f"Invalid fault: {s}; valid faults are {', '.join(sorted(FAULTS))}")
        conditions.append(Node.fault == s)
    for name in EQUALITY_FILTERS:
        if (s := query.get(name)) is not None:
            conditions.append(getattr(Node, name) == s)
    if (s := query.get("conductor_group")) is not None:
        conditions.append(Node.conductor_group == s.lower())
    if (s := query.get("description_contains")) is not None:
        conditions.append(Node.description.contains(s, autoescape=True))
    if (s := query.get("project")) is not None:
        conditions.append(lookup.held_by(s))
    if (s := query.get("shard")) is not None:
        conditions.append(Node.shard.in_([p.strip() for p in s.split(",") if p.strip()]))
    return conditions


def _page(
    request: Request, svc: ApiServices, query: Query, plan: ViewPlan, pg: Page
) -> tuple[Sequence[Row[Any]], dict[int, list[str]], dict[int, dict[str, Any]]]:
    """A page of nodes as Core rows of the columns the view reads, with their traits and
    flow step keys when the view shows them (a few queries for the whole page).

    Hydrating seventy ORM attributes per node would cost more than the rest
    of the request.
    """
    table = Node.__table__
    with svc.db.read() as session:
        columns = dict.fromkeys([*plan.columns, "id"])
        scope = project_scope(request)
        conditions = _filters(query, svc, session, scope)
        stmt = select(*(table.c[name] for name in columns)).where(*conditions)
        stmt = listing.paged(stmt, session, Node, pg, _project_scope(scope))
        connection = session.connection()
        nodes = connection.execute(stmt).all()
        ids = [n.id for n in nodes]
        traits = lookup.traits_of(connection, ids) if plan.traits else {}
        shown_steps = lookup.step_keys(connection, ids) if plan.internal_info else {}
    return nodes, traits, shown_steps


def _list(request: Request, *, detail_path: bool, chassis: str | None = None) -> dict[str, Any]:
    """A page of nodes; ``chassis`` (a path's chassis UUID) limits it to that chassis' nodes."""
    svc = services(request)
    allowed = [*LIST_FILTERS, *PAGING]
    if not detail_path:
        allowed += ["fields", "detail"]
    query = Query(request, allowed)
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE, forbidden_keys=UNSORTABLE)
    wanted = fields(query, SELECTABLE_FIELDS) if not detail_path else None
    detail = listing.detail_or_fields(query, wanted, detail_path=detail_path)
    base = base_url(request)
    plan = view_plan(query.version, tuple(wanted) if wanted is not None else None, not detail)
    if chassis is not None:
        query.params["chassis_uuid"] = lookup.check_uuid(chassis, "chassis_uuid")
    nodes, traits, shown_steps = _page(request, svc, query, plan, pg)
    conductor = svc.conductor_lookup()
    disclosure = node_disclosure(request)
    items = [
        render(
            n,
            plan,
            query.version,
            base,
            conductor=conductor,
            traits=lambda n: traits[n.id],
            step_keys=lambda n: shown_steps.get(n.id, {}),
            disclosure=disclosure,
        )
        for n in nodes
    ]
    path = "nodes/detail" if detail_path else "nodes"
    if chassis is not None:
        path = f"chassis/{chassis}/{path}"
    # An instance has one node: a page of it has no next one.
    last = nodes[-1].uuid if nodes and query.get("instance_uuid") is None else None
    return {"nodes": items, **listing.next_link(base, path, query, pg, len(nodes), last)}


def _project_scope(project: str | None) -> listing.Scope | None:
    if project is None:
        return None
    return lambda stmt: stmt.where(lookup.held_by(project))


@router.get("/nodes", summary="List nodes", dependencies=[guard("baremetal:node:list_all", LIST)])
@router.get(
    "/nodes/", include_in_schema=False, dependencies=[guard("baremetal:node:list_all", LIST)]
)
def list_nodes(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=False))


@router.get(
    "/nodes/detail",
    summary="List nodes with every field",
    dependencies=[guard("baremetal:node:list_all", LIST)],
)
def list_nodes_detail(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=True))


@router.get(
    "/chassis/{chassis_uuid}/nodes",
    summary="List a chassis' nodes",
    dependencies=[guard("baremetal:node:list_all", LIST)],
)
def list_chassis_nodes(chassis_uuid: str, request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=False, chassis=chassis_uuid))


@router.get(
    "/chassis/{chassis_uuid}/nodes/detail",
    summary="List a chassis' nodes with every field",
    dependencies=[guard("baremetal:node:list_all", LIST)],
)
def list_chassis_nodes_detail(chassis_uuid: str, request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=True, chassis=chassis_uuid))


# -- show ---------------------------------------------------------------------


@router.get(
    "/nodes/{node_ident}", summary="Show a node", dependencies=[guard("baremetal:node:get", NODE)]
)
async def show_node(node_ident: str, request: Request) -> JSONResponse:
    return await read_only(services(request), _show_node, node_ident, request)


def _show_node(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["fields"])
    wanted = fields(query, SELECTABLE_FIELDS)
    plan = view_plan(query.version, tuple(wanted) if wanted is not None else None)
    single = not (plan.traits or plan.internal_info)
    with svc.db.snapshot(single_statement=single) as connection:
        node = lookup.find_node_row(connection, node_ident, query.version, plan.columns)
        traits: list[str] = []
        if plan.traits:
            traits = lookup.node_traits(connection, node.id)
        shown_steps = lookup.step_keys(connection, [node.id]) if plan.internal_info else {}
    return JSONResponse(
        render(
            node,
            plan,
            query.version,
            base_url(request),
            conductor=svc.conductor_lookup(),
            traits=lambda _: traits,
            step_keys=lambda _: shown_steps.get(node.id, {}),
            disclosure=node_disclosure(request),
        )
    )


@router.get(
    "/nodes/{node_ident}/children",
    summary="List the UUIDs of a node's child nodes (>=1.83)",
    dependencies=[guard("baremetal:node:list_all", NODE_LIST)],
)
def list_children(node_ident: str, request: Request) -> JSONResponse:
    """The nodes naming this one as ``parent_node``, limited to what the caller may list."""
    version = request_version(request)
    if version < (1, 83):
        raise lookup.not_found_path()
    Query(request, ())
    scope = project_scope(request)
    with services(request).db.read() as session:
        parent = lookup.find_node(session, node_ident, version)
        stmt = select(Node.uuid).where(Node.parent_node == parent.uuid).order_by(Node.id)
        if scope is not None:
            stmt = stmt.where(lookup.held_by(scope))
        children = list(session.scalars(stmt))
    return JSONResponse({"children": children})


# -- create -------------------------------------------------------------------


def _check_version_gates(names: set[str], version: Version) -> None:
    for name in sorted(names):
        since = NODE_FIELDS.get(name)
        if since is not None and version < since:
            raise not_acceptable(f"Field {name} is not available at API version {fmt(version)}")


def _authorize_create(request: Request, given: dict[str, Any]) -> str | None:
    """The owner the new node gets, once the caller may enroll it.

    ``baremetal:node:create`` enrolls any node; a project administrator
    (``baremetal:node:create:self_owned_node``) enrolls nodes its own project
    owns, as in Ironic, and may set only the fields it could set by PATCH
    on such a node (not ``conductor_group``, ``shard``, ``automated_clean``
    off...).
    """
    owner = given.get("owner")
    if allows(request, "baremetal:node:create"):
        return owner
    caller = identity_of(request)
    if caller.project_id is None or not allows(request, "baremetal:node:create:self_owned_node"):
        raise denied("baremetal:node:create")
    if owner not in (None, caller.project_id):
        raise bad_request(
            "Cannot create a node as a project scoped admin with an owner other than "
            "your own project."
        )
    target = node_target(caller.project_id, given.get("lessee"))
    for rule in rules_for_values({k: v for k, v in given.items() if k != "owner"}):
        require(request, rule, target)
    return caller.project_id


@router.post(
    "/nodes",
    status_code=201,
    summary="Enroll a node",
    dependencies=[guard("baremetal:node:create", BODY)],
)
def create_node(request: Request, body: NodeCreate) -> JSONResponse:
    svc = services(request)
    version = request_version(request)
    given = body.model_dump(exclude_unset=True)
    _check_version_gates(set(given), version)
    given["owner"] = _authorize_create(request, given)
    plan = view_plan(version)
    row = nodes.enroll(svc, given, version, plan.columns, actor(request))
    view = render(
        row,
        plan,
        version,
        base_url(request),
        conductor=svc.conductor_lookup(),
        traits=lambda _: [],
        disclosure=node_disclosure(request),
    )
    location = f"{base_url(request)}/v1/nodes/{row.uuid}"
    return JSONResponse(view, status_code=201, headers={"Location": location})


# -- patch --------------------------------------------------------------------


@router.patch(
    "/nodes/{node_ident}",
    summary="Update a node with a JSON patch",
    dependencies=[guard("baremetal:node:update", access.NODE_FIELDS)],
)
@wait_for_lock
def patch_node(
    node_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["reset_interfaces"])
    version = query.version
    reset_interfaces = query.bool("reset_interfaces", (1, 45))

    def view(node: Node, step_keys: dict[str, Any]) -> dict[str, Any]:
        return node_view(
            node,
            version,
            base_url(request),
            conductor=svc.conductor_lookup(),
            step_keys=step_keys,
            disclosure=node_disclosure(request),
        )

    body = nodes.update(
        svc,
        node_ident,
        version,
        operations(patch),
        view,
        caller=policy_caller(request),
        reset_interfaces=reset_interfaces,
        actor=actor(request),
    )
    return JSONResponse(body)


# -- delete -------------------------------------------------------------------


@router.delete(
    "/nodes/{node_ident}",
    status_code=204,
    summary="Delete a node",
    dependencies=[
        guard("baremetal:node:delete", NODE, also=("baremetal:node:delete:self_owned_node",))
    ],
)
@wait_for_lock
def delete_node(node_ident: str, request: Request) -> Response:
    nodes.delete_node(services(request), node_ident, request_version(request))
    return Response(status_code=204)
