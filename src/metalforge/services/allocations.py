"""Allocations: requests to reserve a node, created, renamed and deleted for the API.

Creating one only records the request and queues its processing in the same
transaction: a conductor searches for the node (``conductor.allocation_work``),
so the request never waits on the search, and the work item cannot be lost
without the allocation. Backfilling (``node``) records that an already
deployed node belongs to a new allocation, synchronously: there is nothing
to search for. An allocation and its node's ``instance_uuid`` are one fact
seen from two sides, so whatever removes one removes the other in the same
transaction, and the node is written fenced like every API write.

Callers hand in parsed values, what their authorization decided (a
``Grant``) and the request's ``Caller``, asked here once the node and its
allocation are found; the API owns bodies, JSON patch syntax, policy and
views, and renders the ``AllocationRecord`` these functions return.
"""

from __future__ import annotations

import datetime as dt
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.conductor import allocation_candidates, allocation_work
from metalforge.conductor.flows import allocation as allocation_flow
from metalforge.db.batches import in_batches
from metalforge.db.models import Allocation, AllocationTrait, Node, NodeTrait, utcnow
from metalforge.errors import RequestError, bad_request, conflict, not_acceptable, not_found
from metalforge.services import fencing, lookup
from metalforge.services.caller import AllocationTarget, Caller
from metalforge.services.context import Services
from metalforge.services.microversion import Version
from metalforge.services.patching import Operation, Patchable, PatchPolicy, apply
from metalforge.services.values import check_resource_class, check_trait

BACKFILL_SINCE: Version = (1, 58)
OWNER_SINCE: Version = (1, 60)
STATES = tuple(allocation_flow.SPEC.states)
"""Every state an allocation can be in (a list filter naming another is a 400)."""
PATCH = PatchPolicy({"name": Patchable(), "extra": Patchable()})
"""What a client may change: the rest is the request a conductor acted on."""
GET = "baremetal:allocation:get"
"""Without it on an allocation's owner, a node's allocation reads as none."""
DELETE = "baremetal:allocation:delete"


@dataclass(frozen=True, slots=True)
class AllocationRecord:
    """An allocation as its transaction saw it, to render after the transaction ended."""

    uuid: str
    name: str | None
    resource_class: str | None
    traits: tuple[str, ...]
    candidate_nodes: tuple[str, ...]
    state: str
    last_error: str | None
    node_uuid: str | None
    """The node's UUID (the row holds its id, which the API never shows)."""
    extra: dict[str, Any]
    owner: str | None
    created_at: dt.datetime | None
    updated_at: dt.datetime | None

    @classmethod
    def of(cls, allocation: Allocation, node_uuid: str | None) -> AllocationRecord:
        return cls(
            uuid=allocation.uuid,
            name=allocation.name,
            resource_class=allocation.resource_class,
            traits=tuple(t.trait for t in allocation.traits),
            candidate_nodes=tuple(allocation.candidate_nodes or ()),
            state=allocation.state,
            last_error=allocation.last_error,
            node_uuid=node_uuid,
            extra=allocation.extra,
            owner=allocation.owner,
            created_at=allocation.created_at,
            updated_at=allocation.updated_at,
        )


@dataclass(frozen=True, slots=True)
class NewAllocation:
    """A create request's fields as the client sent them; ``create_allocation`` checks them."""

    resource_class: str | None = None
    traits: Sequence[str] = ()
    candidate_nodes: Sequence[str] = ()
    """Nodes by UUID or name; stored as UUIDs."""
    name: str | None = None
    uuid: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    owner: str | None = None
    """As sent, only to refuse it below 1.60; the owner written is ``Grant.owner``."""
    node: str | None = None
    """The deployed node to backfill into the allocation (from 1.58)."""


@dataclass(frozen=True, slots=True)
class Grant:
    """What the caller's authorization decided for one create request."""

    owner: str | None
    """The owner the allocation gets: the one asked for, or the caller's project."""
    project: str | None
    """When set, only nodes this project owns or leases may be candidates (else: unknown)."""


@dataclass(frozen=True, slots=True)
class _Checked:
    """A create request's values after the checks that need no database."""

    traits: list[str]
    uuid: str
    """The UUID asked for, canonical; empty when none was."""


# -- finding --------------------------------------------------------------------


@lookup.json_suffix_fallback
def find_allocation(session: Session, ident: str) -> Allocation:
    """By UUID or by name; 404 otherwise."""
    allocation = session.scalar(select(Allocation).where(lookup.allocation_where(ident)))
    if allocation is None:
        raise lookup.allocation_not_found(ident)
    return allocation


def no_allocation(node: Node) -> RequestError:
    """The 404 for a node without an allocation, or with one the caller may not read."""
    return not_found(f"Node {node.uuid} is not associated with any allocation.")


def allocation_of(session: Session, node: Node) -> Allocation:
    """``node``'s allocation; a 400 for an ``instance_uuid`` set by hand, else 404."""
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
        raise no_allocation(node)
    return allocation


def _node_uuid(session: Session, allocation: Allocation) -> str | None:
    if allocation.node_id is None:
        return None
    return session.scalar(select(Node.uuid).where(Node.id == allocation.node_id))


def show_allocation(svc: Services, ident: str) -> AllocationRecord:
    """The allocation named by UUID or name, with its node's UUID."""
    with svc.db.read() as session:
        allocation = find_allocation(session, ident)
        return AllocationRecord.of(allocation, _node_uuid(session, allocation))


def show_node_allocation(
    svc: Services, node_ident: str, version: Version, *, caller: Caller
) -> AllocationRecord:
    """The allocation of the node named ``node_ident``, if the caller may read it.

    A node that does not exist is a bad request here (400), as Ironic answers it.
    """
    with svc.db.read() as session:
        node = lookup.find_node_or_none(session, node_ident, version)
        if node is None:
            raise bad_request(f"Node {node_ident} could not be found.")
        allocation = allocation_of(session, node)
        _check_readable(caller, node, allocation)
        return AllocationRecord.of(allocation, node.uuid)


def _check_readable(caller: Caller, node: Node, allocation: Allocation) -> None:
    """A node's allocation the caller may not read is answered as none."""
    if not caller.may(GET, AllocationTarget(allocation.owner)):
        raise no_allocation(node)


# -- create ---------------------------------------------------------------------


def create_allocation(
    svc: Services,
    new: NewAllocation,
    version: Version,
    grant: Grant,
    *,
    caller: Caller,
    actor: str | None,
) -> AllocationRecord:
    """Record an allocation and queue its processing, or backfill ``new.node`` into it.

    The conductors are woken only when work was queued; a backfilled
    allocation is ``active`` when this returns.
    """
    checked = _check_request(new, version)
    try:
        with svc.db.write() as session:
            allocation = _new_row(session, new, checked, version, grant)
            if new.node is None:
                record = _queue_new(session, allocation)
            else:
                record = _backfill(session, allocation, new.node, version, caller, actor)
    except IntegrityError:  # a concurrent request won the race for the name or UUID
        raise conflict("An allocation with this name or UUID already exists.") from None
    if new.node is None:
        svc.notify()
    return record


def _check_request(new: NewAllocation, version: Version) -> _Checked:
    """Checks that need no database, before the transaction: fields, traits, the UUID."""
    if new.node is not None and version < BACKFILL_SINCE:
        raise bad_request("Backfilling allocations (node) needs API version 1.58 or newer.")
    if new.owner is not None and version < OWNER_SINCE:
        raise not_acceptable("Field owner is not available before API version 1.60")
    if new.resource_class is None and new.node is None:
        raise bad_request("The resource_class field is mandatory when not backfilling.")
    if new.resource_class is not None:
        check_resource_class(new.resource_class)
    if new.name is not None:
        lookup.check_name(new.name, refusal="Cannot create allocation with invalid name '{name}'")
    traits = list(dict.fromkeys(check_trait(t) for t in new.traits))
    return _Checked(traits, lookup.check_uuid(new.uuid) if new.uuid else "")


def _new_row(
    session: Session, new: NewAllocation, checked: _Checked, version: Version, grant: Grant
) -> Allocation:
    """The allocation as asked (not yet added): ``allocating``, its UUID maybe still empty."""
    return Allocation(
        uuid=checked.uuid,
        name=new.name,
        resource_class=new.resource_class,
        candidate_nodes=_resolve_candidates(session, new.candidate_nodes, version, grant.project),
        state=allocation_work.ALLOCATING,
        owner=grant.owner,
        extra=dict(new.extra),
        traits=[AllocationTrait(trait=t) for t in checked.traits],
    )


def _resolve_candidates(
    session: Session, names: Sequence[str], version: Version, project: str | None
) -> list[str]:
    """Candidate nodes as UUIDs; an unknown one is a 400 (the request cannot be met as asked).

    With ``project``, only the nodes it owns or leases can be named (Ironic's
    rule for callers without ``create_restricted``); others are unknown.
    """
    found = _candidates_by_ident(session, names, version)
    resolved: list[str] = []
    missing: list[str] = []
    for ident in names:
        node = found.get(ident)
        if node is None or (project is not None and project not in (node[1], node[2])):
            missing.append(ident)
        elif node[0] not in resolved:
            resolved.append(node[0])
    if missing:
        # Ironic's words, which clients match on.
        raise bad_request(f"Nodes cannot be found: {', '.join(missing)}")
    return resolved


def _candidates_by_ident(
    session: Session, names: Sequence[str], version: Version
) -> dict[str, tuple[str, str | None, str | None]]:
    """``(uuid, owner, lessee)`` of each named node, found in batches of one query each
    (a fleet's worth of candidates took one query a name, inside the write transaction).
    Names count from 1.5, as everywhere a node is named."""
    uuids = {str(uuidlib.UUID(n)): n for n in names if lookup.is_uuid(n)}
    plain = [n for n in names if not lookup.is_uuid(n)] if version >= (1, 5) else []
    found: dict[str, tuple[str, str | None, str | None]] = {}
    columns = (Node.uuid, Node.name, Node.owner, Node.lessee)
    for batch in in_batches(list(uuids)):
        for uuid, _, owner, lessee in session.execute(select(*columns).where(Node.uuid.in_(batch))):
            found[uuids[uuid]] = (uuid, owner, lessee)
    for batch in in_batches(plain):
        for uuid, name, owner, lessee in session.execute(
            select(*columns).where(Node.name.in_(batch))
        ):
            if name is not None:
                found[name] = (uuid, owner, lessee)
    return found


def _queue_new(session: Session, allocation: Allocation) -> AllocationRecord:
    """Add the allocation and queue its processing: one transaction, so neither is lost."""
    allocation.uuid = allocation.uuid or str(uuidlib.uuid4())
    _check_uuid_free(session, allocation.uuid)
    _check_name_free(session, allocation.name)
    session.add(allocation)
    session.flush()
    allocation_work.enqueue(session, allocation.id)
    return AllocationRecord.of(allocation, None)


def _backfill(
    session: Session,
    allocation: Allocation,
    node_ident: str,
    version: Version,
    caller: Caller,
    actor: str | None,
) -> AllocationRecord:
    """Add the allocation ``active`` with the deployed node, which is written fenced."""
    node = _backfill_node(session, allocation, node_ident, version, caller)
    _adopt_node(allocation, node)
    if allocation.uuid != node.instance_uuid:
        _check_uuid_free(session, allocation.uuid)
    _check_name_free(session, allocation.name)
    session.add(allocation)
    session.flush()
    changes = {"instance_uuid": allocation.uuid, "allocation_id": allocation.id}
    fencing.update_node(session, node, changes, race="changed while it was being backfilled")
    fencing.record(
        session, node, "allocation", f"backfilled into allocation {allocation.uuid}", actor
    )
    return AllocationRecord.of(allocation, node.uuid)


def _backfill_node(
    session: Session, allocation: Allocation, ident: str, version: Version, caller: Caller
) -> Node:
    """The node to backfill: seen by the caller, unlocked, deployed, free, matching."""
    node = _visible_node(session, ident, version, caller)
    if node is None:  # missing or hidden: the request cannot be met as asked
        raise bad_request(f"Node {ident} could not be found.")
    fencing.check_unlocked(session, node)
    if node.provision_state != states.ACTIVE:
        raise bad_request(
            f"Cannot create an allocation with node {node.uuid} in provision state "
            f"{node.provision_state}: backfilling needs an active node."
        )
    if node.allocation_id is not None:
        raise conflict(f"Node {node.uuid} already has an allocation.")
    traits = set(session.scalars(select(NodeTrait.trait).where(NodeTrait.node_id == node.id)))
    # The rule a conductor applies when it picks a node (it does not read the unset id).
    why = allocation_candidates.node_matches(
        node, allocation_candidates.request_of(allocation), traits
    )
    if why is not None:
        raise bad_request(f"Node {node.uuid} cannot be backfilled into this allocation: {why}.")
    return node


def _visible_node(session: Session, ident: str, version: Version, caller: Caller) -> Node | None:
    """The node named ``ident``, or None when it is missing or the caller may not see it."""
    node = lookup.find_node_or_none(session, ident, version)
    return node if node is not None and caller.sees(node.owner, node.lessee) else None


def _adopt_node(allocation: Allocation, node: Node) -> None:
    """What a backfilled allocation takes from its node: UUID, resource class, the node."""
    if not allocation.uuid:
        allocation.uuid = node.instance_uuid or str(uuidlib.uuid4())
    elif node.instance_uuid not in (None, allocation.uuid):
        raise bad_request(
            f"Node {node.uuid} already has instance_uuid {node.instance_uuid}, "
            f"which differs from the allocation's UUID {allocation.uuid}."
        )
    if allocation.resource_class is None:
        allocation.resource_class = node.resource_class
    allocation.state = allocation_work.ACTIVE
    allocation.node_id = node.id


def _check_uuid_free(session: Session, allocation_uuid: str) -> None:
    """An allocation's UUID becomes its node's ``instance_uuid``: unique across both."""
    taken = select(Allocation.id).where(Allocation.uuid == allocation_uuid)
    if session.scalar(taken) is not None:
        raise conflict(f"An allocation with UUID {allocation_uuid} already exists.")
    if session.scalar(select(Node.id).where(Node.instance_uuid == allocation_uuid)) is not None:
        raise conflict(
            f"An allocation with UUID {allocation_uuid} cannot be created: "
            "a node's instance_uuid already has that value."
        )


def _check_name_free(session: Session, name: str | None) -> None:
    if name is not None and session.scalar(select(Allocation.id).where(Allocation.name == name)):
        raise conflict(f"An allocation with name {name} already exists.")


# -- update ---------------------------------------------------------------------


def update_allocation(
    svc: Services, ident: str, version: Version, ops: Sequence[Operation]
) -> AllocationRecord:
    """Apply the JSON patch ``ops`` to the allocation's name and extra (``PATCH``, checked
    before the allocation is read), the result checked like a new allocation's."""
    PATCH.check(ops, version)
    try:
        with svc.db.write() as session:
            allocation = find_allocation(session, ident)
            after = apply({"name": allocation.name, "extra": allocation.extra}, ops)
            name, extra = _edited(session, allocation, after)
            allocation.name, allocation.extra, allocation.updated_at = name, extra, utcnow()
            session.flush()
            record = AllocationRecord.of(allocation, _node_uuid(session, allocation))
    except IntegrityError:  # a concurrent request took the name meanwhile
        raise conflict("An allocation with that name already exists.") from None
    return record


def _edited(
    session: Session, allocation: Allocation, after: Mapping[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """The name and extra ``after`` holds, if they are valid and the name is free."""
    name, extra = after.get("name"), after.get("extra") or {}
    if name is not None:
        if not isinstance(name, str):
            raise bad_request("Invalid value for name: must be a string")
        lookup.check_name(name)
    if not isinstance(extra, dict):
        raise bad_request("Invalid value for extra: must be a JSON object")
    if name != allocation.name:
        _check_name_free(session, name)
    return name, extra


# -- delete ---------------------------------------------------------------------


def delete_allocation(svc: Services, ident: str, *, actor: str | None) -> None:
    """Delete the allocation named by UUID or name, freeing its node."""
    with svc.db.write() as session:
        _deallocate(session, find_allocation(session, ident), actor)


def delete_node_allocation(
    svc: Services,
    node_ident: str,
    version: Version,
    *,
    caller: Caller,
    actor: str | None,
) -> None:
    """Delete the allocation of the node named ``node_ident``: none for a caller that may
    not read it (404), 403 for one that may read but not delete it."""
    with svc.db.write() as session:
        node = lookup.find_node(session, node_ident, version)
        allocation = allocation_of(session, node)
        _check_readable(caller, node, allocation)
        caller.require(DELETE, AllocationTarget(allocation.owner))
        _deallocate(session, allocation, actor)


def _deallocate(session: Session, allocation: Allocation, actor: str | None) -> None:
    """Free the allocation's node and delete the allocation, in the caller's transaction."""
    if allocation.node_id is not None:
        node = session.get(Node, allocation.node_id)
        if node is not None:
            _free(session, node, allocation, actor)
    allocation_work.delete_allocation(session, allocation.id)


def _allocation_stays(node: Node) -> bool:
    """The node's allocation may not be taken from it now (seed 004).

    A deployed node, or one in a state that allows no update, keeps it;
    maintenance lifts the rule: that is how an operator cleans up by hand.
    """
    held = states.keeps_its_allocation(node.provision_state, node.target_provision_state)
    return held and not node.maintenance


def _free(session: Session, node: Node, allocation: Allocation, actor: str | None) -> None:
    """Clear the node's side of the allocation, fenced.

    Refused while the node is deployed or in a state that allows no update
    (seed 004), unless it is in maintenance: that is how an operator cleans
    up by hand.
    """
    if _allocation_stays(node):
        raise conflict(
            f"Cannot remove allocation {allocation.uuid} from node {node.uuid} in "
            f"provision state {node.provision_state}; undeploy the node or set it "
            "into maintenance mode first."
        )
    fencing.check_unlocked(session, node)
    changes = {"instance_uuid": None, "allocation_id": None}
    fencing.update_node(session, node, changes, race="changed while it was being freed")
    note = f"allocation {allocation.uuid} deleted; the node is free"
    fencing.record(session, node, "allocation", note, actor)


def release_for_patch(session: Session, node: Node, changes: dict[str, Any]) -> None:
    """Delete ``node``'s allocation when a node PATCH's ``changes`` remove its ``instance_uuid``.

    An allocation and its node's ``instance_uuid`` are one fact: removing the
    ``instance_uuid`` by hand deletes the allocation in the PATCH's
    transaction, and ``changes`` gains ``allocation_id``, written with the
    rest of the PATCH (fenced there). Refused while the node is deployed or
    in a state that allows no update, unless it is in maintenance. Setting
    ``instance_uuid`` never creates one.
    """
    if node.allocation_id is None or changes.get("instance_uuid") is not None:
        return
    if _allocation_stays(node):
        raise conflict(
            f"Cannot remove the instance_uuid of node {node.uuid} in provision state "
            f"{node.provision_state}: it belongs to an allocation. Undeploy the node or set "
            "it into maintenance mode first."
        )
    allocation_work.delete_allocation(session, node.allocation_id)
    changes["allocation_id"] = None
