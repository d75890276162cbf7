"""``/v1/nodes``: create, list, show, patch, delete."""

from __future__ import annotations

import functools
import uuid as uuidlib
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Request, Response
from sqlalchemy import Insert, Select, Table, bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.api.auth import node_fields
from metalforge.api.auth.access import (
    actor,
    allows,
    caller_of,
    forbidden,
    guard,
    node_disclosure,
    project_scope,
    require,
)
from metalforge.api.auth.policy import node_target
from metalforge.api.locking import wait_for_lock
from metalforge.api.node_view import (
    NODE_FIELDS,
    SELECTABLE_FIELDS,
    node_view,
    render,
    view_plan,
)
from metalforge.api.params import Page, Query, fields, keyset, page, parse_bool
from metalforge.api.patching import apply_patch
from metalforge.api.responses import JSONResponse
from metalforge.api.routes import node_allocation
from metalforge.api.schemas import NodeCreate, PatchOperation, max_lengths
from metalforge.api.services import ApiServices, base_url, read_only, services
from metalforge.api.versions import Version, fmt, request_version
from metalforge.conductor import allocations, history
from metalforge.conductor.hashring import HashRing
from metalforge.db.models import INTERFACES, Node, NodeTrait, Port, utcnow
from metalforge.drivers.hardware import UnknownDriver
from metalforge.errors import NodeLocked, RequestError, bad_request, conflict, not_acceptable
from metalforge.services import lookup

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
UNSORTABLE = {
    "properties",
    "driver_info",
    "extra",
    "instance_info",
    "driver_internal_info",
    "clean_step",
    "deploy_step",
    "raid_config",
    "target_raid_config",
    "traits",
    "network_data",
    "service_step",
}
SORTABLE = {c.key for c in Node.__table__.columns} - UNSORTABLE - {"epoch"}
FAULTS = {"power failure", "clean failure", "rescue abort failure", "service failure"}

PATCHABLE = {
    "automated_clean",
    "chassis_uuid",
    "conductor_group",
    "description",
    "disable_power_off",
    "driver",
    "driver_info",
    "extra",
    "instance_info",
    "instance_name",
    "instance_uuid",
    "lessee",
    "maintenance",
    "name",
    "network_data",
    "owner",
    "properties",
    "protected",
    "protected_reason",
    "resource_class",
    "retired",
    "retired_reason",
    "shard",
    "parent_node",
    *(f"{family}_interface" for family in INTERFACES),
}
DICT_FIELDS = {"driver_info", "extra", "instance_info", "network_data", "properties"}
BOOL_FIELDS = {"automated_clean", "disable_power_off", "maintenance", "protected", "retired"}
NULLABLE_BOOL = {"automated_clean"}
MAX_LENGTHS = max_lengths(NodeCreate)
"""PATCH holds strings to the limits create does (and the columns need)."""


# -- listing ------------------------------------------------------------------


def _filters(query: Query, svc: ApiServices, session: Session, scope: str | None) -> list[Any]:
    conditions: list[Any] = []
    for name, since in LIST_FILTERS.items():
        query.get(name, since)  # a filter newer than the request's version is a 406
    if scope is not None:
        # A project-scoped caller sees the nodes its project owns or leases.
        if query.get("project") not in (None, scope):
            raise forbidden("baremetal:node:list_all")
        conditions.append(lookup.held_by(scope))
    if (v := query.bool("associated")) is not None:
        conditions.append(Node.instance_uuid.is_not(None) if v else Node.instance_uuid.is_(None))
    if (v := query.bool("maintenance")) is not None:
        conditions.append(Node.maintenance.is_(v))
    if (v := query.bool("retired")) is not None:
        conditions.append(Node.retired.is_(v))
    if (s := query.get("provision_state")) is not None:
        if s not in states.STATES:
            raise bad_request(f"Invalid provision state: {s}")
        conditions.append(Node.provision_state == s)
    if (s := query.get("fault")) is not None:
        if s not in FAULTS:
            raise bad_request(f"Invalid fault: {s}; valid faults are {', '.join(sorted(FAULTS))}")
        conditions.append(Node.fault == s)
    for name in (
        "chassis_uuid",
        "instance_uuid",
        "driver",
        "resource_class",
        "owner",
        "lessee",
        "instance_name",
        "parent_node",
    ):
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
    if (v := query.bool("sharded")) is not None:
        conditions.append(Node.shard.is_not(None) if v else Node.shard.is_(None))
    if query.get("parent_node") is None and not query.bool("include_children"):
        conditions.append(Node.parent_node.is_(None))
    if (s := query.get("conductor")) is not None:
        owned = [n.id for n in session.scalars(select(Node)) if _conductor(svc)(n) == s]
        conditions.append(Node.id.in_(owned))
    return conditions


def _conductor(svc: ApiServices) -> Callable[[Any], str | None]:
    """The ``conductor`` field's getter for one request: rings looked up once per page."""
    rings: dict[tuple[str, str], HashRing] = {}

    def owner(node: Any) -> str | None:
        key = (node.driver, node.conductor_group)
        ring = rings.get(key)
        if ring is None:
            ring = rings[key] = svc.directory.ring(*key)
        return ring.owner(node.uuid)

    return owner


def _paginate(
    stmt: Select[Any], session: Session, pg: Page, scope: str | None = None
) -> Select[Any]:
    after: tuple[Any, int] | None = None
    if pg.marker is not None:
        # A marker the caller may not see does not exist for it.
        query = select(getattr(Node, pg.sort_key), Node.id).where(Node.uuid == pg.marker)
        if scope is not None:
            query = query.where(lookup.held_by(scope))
        marker = session.execute(query).first()
        if marker is None:
            raise bad_request(f"Marker {pg.marker} could not be found.")
        after = (marker[0], marker[1])
    return keyset(stmt, getattr(Node, pg.sort_key), Node.id, pg, after)


_NODE_TRAITS = (
    select(NodeTrait.__table__.c.trait)
    .where(NodeTrait.__table__.c.node_id == bindparam("b_node"))
    .order_by(NodeTrait.__table__.c.trait)
)


def _traits(session: Session, node_ids: list[int]) -> dict[int, list[str]]:
    """The traits of ``node_ids``, sorted, read in a few queries for a whole page."""
    found: dict[int, list[str]] = {node_id: [] for node_id in node_ids}
    for start in range(0, len(node_ids), 500):
        rows = session.connection().execute(
            select(NodeTrait.node_id, NodeTrait.trait)
            .where(NodeTrait.node_id.in_(node_ids[start : start + 500]))
            .order_by(NodeTrait.node_id, NodeTrait.trait)
        )
        for node_id, trait in rows:
            found[node_id].append(trait)
    return found


def _list(request: Request, *, detail_path: bool) -> dict[str, Any]:
    svc = services(request)
    allowed = [*LIST_FILTERS, *PAGING]
    if not detail_path:
        allowed += ["fields", "detail"]
    query = Query(request, allowed)
    pg = page(query, svc.settings.api.max_limit, sortable=SORTABLE, forbidden_keys=UNSORTABLE)
    wanted = fields(query, SELECTABLE_FIELDS) if not detail_path else None
    detail = detail_path or bool(query.bool("detail", (1, 43)))
    if wanted is not None and detail:
        raise bad_request("Can not specify ?detail=True and fields in the same request.")
    base = base_url(request)
    plan = view_plan(query.version, tuple(wanted) if wanted is not None else None, not detail)
    table = Node.__table__
    with svc.db.read() as session:
        # Core rows of the columns the view reads: hydrating seventy ORM
        # attributes per node would cost more than the rest of the request.
        columns = dict.fromkeys([*plan.columns, "id"])
        scope = project_scope(request)
        conditions = _filters(query, svc, session, scope)
        stmt = select(*(table.c[name] for name in columns)).where(*conditions)
        nodes = session.connection().execute(_paginate(stmt, session, pg, scope)).all()
        traits = _traits(session, [n.id for n in nodes]) if plan.traits else {}
    conductor = _conductor(svc)
    disclosure = node_disclosure(request)
    items = [
        render(
            n,
            plan,
            query.version,
            base,
            conductor=conductor,
            traits=lambda n: traits[n.id],
            disclosure=disclosure,
        )
        for n in nodes
    ]
    body: dict[str, Any] = {"nodes": items}
    if len(nodes) == pg.limit and query.get("instance_uuid") is None:
        params = {k: v for k, v in query.params.items() if k != "marker"}
        params.update(limit=str(pg.limit), marker=nodes[-1].uuid)
        path = "nodes/detail" if detail_path else "nodes"
        body["next"] = f"{base}/v1/{path}?{urlencode(params)}"
    return body


@router.get("/nodes", summary="List nodes", dependencies=[guard("baremetal:node:list_all", "list")])
@router.get(
    "/nodes/", include_in_schema=False, dependencies=[guard("baremetal:node:list_all", "list")]
)
def list_nodes(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=False))


@router.get(
    "/nodes/detail",
    summary="List nodes with every field",
    dependencies=[guard("baremetal:node:list_all", "list")],
)
def list_nodes_detail(request: Request) -> JSONResponse:
    return JSONResponse(_list(request, detail_path=True))


# -- show ---------------------------------------------------------------------


@router.get(
    "/nodes/{node_ident}", summary="Show a node", dependencies=[guard("baremetal:node:get", "node")]
)
async def show_node(node_ident: str, request: Request) -> JSONResponse:
    return await read_only(services(request), _show_node, node_ident, request)


def _show_node(node_ident: str, request: Request) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["fields"])
    wanted = fields(query, SELECTABLE_FIELDS)
    plan = view_plan(query.version, tuple(wanted) if wanted is not None else None)
    with svc.db.snapshot(single_statement=not plan.traits) as connection:
        node = lookup.find_node_row(connection, node_ident, query.version, plan.columns)
        traits: list[str] = []
        if plan.traits:
            traits = list(connection.scalars(_NODE_TRAITS, {"b_node": node.id}))
    return JSONResponse(
        render(
            node,
            plan,
            query.version,
            base_url(request),
            conductor=_conductor(svc),
            traits=lambda _: traits,
            disclosure=node_disclosure(request),
        )
    )


# -- create -------------------------------------------------------------------


def _check_version_gates(names: set[str], version: Version) -> None:
    for name in sorted(names):
        since = NODE_FIELDS.get(name)
        if since is not None and version < since:
            raise not_acceptable(f"Field {name} is not available at API version {fmt(version)}")


def _check_driver(svc: ApiServices, driver: str, values: dict[str, Any]) -> dict[str, str]:
    try:
        return svc.drivers.resolve_interface_names(
            driver, {f: values.get(f"{f}_interface") for f in INTERFACES}
        )
    except UnknownDriver as exc:
        if driver not in svc.drivers.types:
            raise bad_request(
                f"No valid host was found. Reason: No conductor service registered which "
                f"supports driver {driver} for conductor group "
                f'"{values.get("conductor_group") or ""}".'
            ) from None
        raise bad_request(str(exc)) from None


def _check_values(values: dict[str, Any]) -> None:
    if values.get("name") is not None:
        lookup.check_name(values["name"], reserved=lookup.RESERVED_NODE_NAMES)
    for key in ("instance_uuid", "chassis_uuid", "parent_node"):
        if values.get(key) is not None:
            values[key] = lookup.check_uuid(str(values[key]), key)
    if values.get("conductor_group") is not None:
        group = str(values["conductor_group"]).lower()
        if len(group) > 255 or not all(c.isalnum() or c in "._-" for c in group):
            raise bad_request(f"Invalid conductor_group {group!r}")
        values["conductor_group"] = group


def _duplicate(exc: IntegrityError, values: dict[str, Any]) -> RequestError:
    text = str(exc.orig).lower()
    if "name" in text and values.get("name"):
        return conflict(f"A node with name {values['name']} already exists.")
    if "instance_uuid" in text:
        return conflict(
            f"Instance {values.get('instance_uuid')} is already associated with a node."
        )
    return conflict(f"A node with UUID {values.get('uuid')} already exists.")


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
    caller = caller_of(request)
    if caller.project_id is None or not allows(request, "baremetal:node:create:self_owned_node"):
        raise forbidden("baremetal:node:create")
    if owner not in (None, caller.project_id):
        raise bad_request(
            "Cannot create a node as a project scoped admin with an owner other than "
            "your own project."
        )
    target = node_target(caller.project_id, given.get("lessee"))
    for rule in node_fields.rules_for_values({k: v for k, v in given.items() if k != "owner"}):
        require(request, rule, target)
    return caller.project_id


@functools.lru_cache(maxsize=64)
def _insert_node(columns: tuple[str, ...]) -> Insert:
    """``INSERT INTO nodes ... RETURNING`` ``columns`` then ``id`` (column defaults applied)."""
    table = cast(Table, Node.__table__)
    returned = [table.c[name] for name in dict.fromkeys([*columns, "id"])]
    return insert(table).returning(*returned)


@router.post(
    "/nodes",
    status_code=201,
    summary="Enroll a node",
    dependencies=[guard("baremetal:node:create", "body")],
)
def create_node(request: Request, body: NodeCreate) -> JSONResponse:
    svc = services(request)
    version = request_version(request)
    given = body.model_dump(exclude_unset=True)
    _check_version_gates(set(given), version)
    given["owner"] = _authorize_create(request, given)
    values = {k: v for k, v in given.items() if v is not None or k in ("name",)}
    _check_values(values)
    interfaces = _check_driver(svc, body.driver, values)
    for key in ("driver_info", "extra", "instance_info", "properties", "network_data"):
        values[key] = values.get(key) or {}
    values.update({f"{family}_interface": name for family, name in interfaces.items()})
    values["uuid"] = (
        lookup.check_uuid(values["uuid"]) if values.get("uuid") else str(uuidlib.uuid4())
    )
    values.setdefault("resource_class", svc.settings.conductor.default_resource_class)
    values["provision_state"] = states.ENROLL if version >= (1, 11) else states.AVAILABLE
    if values["provision_state"] == states.AVAILABLE:
        values["power_state"] = None
    values.setdefault("conductor_group", "")
    plan = view_plan(version)
    try:
        with svc.db.write() as session:
            # One Core INSERT ... RETURNING of what the view shows: the ORM's
            # flush and refresh took most of the request, inside the write lock.
            node = (
                session.connection()
                .execute(_insert_node(plan.columns), {**values, "provision_updated_at": utcnow()})
                .one()
            )
            history.record(
                session,
                node.id,
                "provisioning",
                f"node enrolled in {values['provision_state']}",
                state=values["provision_state"],
                user=actor(request),
            )
    except IntegrityError as exc:
        raise _duplicate(exc, values) from None
    view = render(
        node,
        plan,
        version,
        base_url(request),
        conductor=_conductor(svc),
        traits=lambda _: [],
        disclosure=node_disclosure(request),
    )
    return JSONResponse(
        view,
        status_code=201,
        headers={"Location": f"{base_url(request)}/v1/nodes/{values['uuid']}"},
    )


# -- patch --------------------------------------------------------------------


def _patch_document(node: Node) -> dict[str, Any]:
    return {name: getattr(node, name) for name in PATCHABLE}


def _check_patch_paths(ops: list[PatchOperation], version: Version) -> None:
    for op in ops:
        root = op.path.lstrip("/").split("/", 1)[0]
        if root == "traits":
            raise bad_request(
                "Cannot update node traits via node patch. Node traits should "
                "be updated via the node traits API."
            )
        if root not in PATCHABLE:
            raise bad_request(
                f"Cannot patch {op.path}. Only the following can be updated: "
                f"{', '.join(sorted(PATCHABLE))}"
            )
        since = NODE_FIELDS.get(root)
        if since is not None and version < since:
            raise not_acceptable(f"Field {root} is not available at API version {fmt(version)}")


def _normalise(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Changed values, with removed fields reset and types checked."""
    changed: dict[str, Any] = {}
    for name in PATCHABLE:
        value = after.get(name)
        if name in DICT_FIELDS:
            value = {} if value is None else value
            if not isinstance(value, dict):
                raise bad_request(f"Invalid value for {name}: must be a JSON object")
        elif name in BOOL_FIELDS:
            if value is None and name not in NULLABLE_BOOL:
                value = False
            if isinstance(value, str):
                # `baremetal node set --protected` sends "True": Ironic accepts strings here.
                value = parse_bool(name, value)
            if value is not None and not isinstance(value, bool):
                raise bad_request(f"Invalid value for {name}: must be a boolean")
        elif value is not None and not isinstance(value, str):
            raise bad_request(f"Invalid value for {name}: must be a string")
        elif value is not None and len(value) > MAX_LENGTHS.get(name, len(value)):
            raise bad_request(
                f"Invalid value for {name}: at most {MAX_LENGTHS[name]} characters are allowed"
            )
        if name == "conductor_group" and value is None:
            value = ""
        if value != before.get(name):
            changed[name] = value
    return changed


@router.patch(
    "/nodes/{node_ident}",
    summary="Update a node with a JSON patch",
    dependencies=[guard("baremetal:node:update", "node_fields")],
)
@wait_for_lock
def patch_node(
    node_ident: str, request: Request, patch: list[PatchOperation] = Body(...)
) -> JSONResponse:
    svc = services(request)
    query = Query(request, ["reset_interfaces"])
    version = query.version
    reset_interfaces = query.bool("reset_interfaces", (1, 45))
    _check_patch_paths(patch, version)
    node_fields.authorize_patch(request, patch)
    with svc.db.write() as session:
        node = lookup.find_node(session, node_ident, version, for_update=True)
        before = _patch_document(node)
        after = apply_patch(before, patch)
        if isinstance(after.get("driver_info"), dict):
            node_fields.check_bmc_redirect(
                request, patch, before["driver_info"], after["driver_info"]
            )
        changes = _normalise(before, after)
        _check_patch_allowed(node, changes)
        _check_values(changes)
        if "instance_uuid" in changes and node.allocation_id is not None:
            node_allocation.release_for_patch(session, node, changes)
        if {"driver", *(f"{f}_interface" for f in INTERFACES)} & set(changes):
            driver = changes.get("driver", node.driver)
            requested = {
                f: changes.get(f"{f}_interface", getattr(node, f"{f}_interface"))
                for f in INTERFACES
            }
            if "driver" in changes and reset_interfaces is not False:
                requested = {f: changes.get(f"{f}_interface") for f in INTERFACES}
            interfaces = _check_driver(
                svc, driver, {f"{f}_interface": v for f, v in requested.items()}
            )
            changes.update(
                {
                    f"{f}_interface": n
                    for f, n in interfaces.items()
                    if n != getattr(node, f"{f}_interface")
                }
            )
        elif reset_interfaces and not any(op.path == "/driver" for op in patch):
            # What counts is a /driver operation in the patch, even one that keeps the
            # same driver (`baremetal node set --driver <same> --reset-interfaces`).
            raise bad_request(
                "The reset_interfaces parameter can only be used when changing the driver."
            )
        if changes.get("maintenance") is False:
            changes.update(maintenance_reason=None, fault=None)
        for flag in ("protected", "retired"):
            # A reason outliving its flag would be stale; ironicclient documents
            # `node unset --protected` as clearing the reason too.
            if changes.get(flag) is False and getattr(node, f"{flag}_reason") is not None:
                changes[f"{flag}_reason"] = None
        if changes:
            _write_changes(session, node, changes, actor(request))
        session.refresh(node)
        view = node_view(
            node,
            version,
            base_url(request),
            conductor=_conductor(svc),
            disclosure=node_disclosure(request),
        )
        return JSONResponse(view)


def _check_patch_allowed(node: Node, changes: dict[str, Any]) -> None:
    if not changes:
        return
    removing_instance = set(changes) == {"instance_uuid"} and changes["instance_uuid"] is None
    if (
        node.target_provision_state is not None
        and node.provision_state not in states.UPDATE_ALLOWED_STATES
        and not (removing_instance and node.maintenance)
    ):
        raise conflict(
            f"Node {node.uuid} can not be updated while a state transition is in progress."
        )
    if node.reservation is not None:
        raise NodeLocked(node.uuid, node.reservation)
    new_instance = changes.get("instance_uuid")
    if new_instance is not None and node.instance_uuid not in (None, new_instance):
        raise conflict(f"Node {node.uuid} is associated with instance {node.instance_uuid}.")


def _write_changes(session: Session, node: Node, changes: dict[str, Any], who: str | None) -> None:
    """Write a PATCH, fenced: compared with the epoch read, which it bumps.

    A writer that read the node before this one committed (and did not wait
    on its row lock) finds another epoch and answers 409 instead of
    overwriting what this one wrote.
    """
    try:
        result = session.execute(
            update(Node)
            .where(Node.id == node.id, Node.epoch == node.epoch, Node.reservation.is_(None))
            .values(**changes, epoch=Node.epoch + 1, updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        session.flush()
    except IntegrityError as exc:
        raise _duplicate(exc, {**changes, "uuid": node.uuid}) from None
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise conflict(f"Node {node.uuid} changed while it was being updated; please retry.")
    history.record(
        session,
        node.id,
        "update",
        f"updated {', '.join(sorted(changes))}",
        state=node.provision_state,
        target=node.target_provision_state,
        user=who,
    )


# -- delete -------------------------------------------------------------------


@router.delete(
    "/nodes/{node_ident}",
    status_code=204,
    summary="Delete a node",
    dependencies=[
        guard("baremetal:node:delete", "node", also=("baremetal:node:delete:self_owned_node",))
    ],
)
@wait_for_lock
def delete_node(node_ident: str, request: Request) -> Response:
    svc = services(request)
    version = request_version(request)
    with svc.db.write() as session:
        node = lookup.find_node(session, node_ident, version)
        if node.reservation is not None:
            raise NodeLocked(node.uuid, node.reservation)
        if node.protected:
            # 403 as in Ironic: a 409 would make both clients retry for ~10 s.
            raise RequestError(
                403, f"Node {node.uuid} is protected and cannot be undeployed, rebuilt or deleted"
            )
        if node.instance_uuid and not node.maintenance:
            raise conflict(f"Node {node.uuid} is associated with instance {node.instance_uuid}.")
        allowed = set(states.DELETE_ALLOWED_STATES)
        if not svc.settings.api.allow_delete_available:
            allowed.discard(states.AVAILABLE)
        if node.provision_state not in allowed and not node.maintenance:
            raise conflict(
                f"Can not delete node {node.uuid} while it is in provision state "
                f'"{node.provision_state}". Valid provision states to start deletion are: '
                f"{', '.join(sorted(allowed))}, or set the node into maintenance mode"
            )
        if node.allocation_id is not None:
            allocations.delete_allocation(session, node.allocation_id)
        session.execute(delete(Port).where(Port.node_id == node.id))
        session.execute(delete(NodeTrait).where(NodeTrait.node_id == node.id))
        result = session.execute(
            delete(Node)
            .where(Node.id == node.id, Node.epoch == node.epoch, Node.reservation.is_(None))
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise conflict(f"Node {node.uuid} changed while it was being deleted; please retry.")
    return Response(status_code=204)
