"""Which nodes may take an allocation, and in what order to try them.

An allocation names what it wants (a resource class, traits, candidate
nodes, an owner); this module answers which available nodes match, read
without holding anything. ``allocation_work`` then tries them one by one
under each node's reservation and checks the node again there
(``allocatable``, ``node_matches``), because the list is stale as soon as it
is read. Backfilling (``services.allocations``: an allocation naming its
node) asks ``node_matches`` too, so both say why a node does not fit in the
same words.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.db.batches import in_batches
from metalforge.db.models import Allocation, Node, NodeTrait


@dataclass(frozen=True, slots=True)
class Request:
    """What an allocation asks for, read once, detached from any session."""

    id: int
    uuid: str
    name: str | None
    resource_class: str | None
    traits: tuple[str, ...]
    candidate_nodes: tuple[str, ...]
    owner: str | None


def request_of(allocation: Allocation) -> Request:
    return Request(
        id=allocation.id,
        uuid=allocation.uuid,
        name=allocation.name,
        resource_class=allocation.resource_class,
        traits=tuple(t.trait for t in allocation.traits),
        candidate_nodes=tuple(allocation.candidate_nodes or ()),
        owner=allocation.owner,
    )


def node_matches(node: Node, req: Request, node_traits: set[str]) -> str | None:
    """Why ``node`` cannot take ``req`` (``None``: it can). Shared with backfilling's checks."""
    if req.resource_class is not None and node.resource_class != req.resource_class:
        return f"its resource class is {node.resource_class}, not {req.resource_class}"
    if req.candidate_nodes and node.uuid not in req.candidate_nodes:
        return "it is not one of the candidate nodes"
    if req.owner is not None and req.owner not in (node.owner, node.lessee):
        return f"it does not belong to owner {req.owner} (as its owner or lessee)"
    missing = sorted(set(req.traits) - node_traits)
    if missing:
        return f"it lacks the traits {', '.join(missing)}"
    return None


def allocatable(node: Node) -> bool:
    """Whether ``node`` is free to be allocated at all, whatever the allocation asks."""
    return (
        node.provision_state == states.AVAILABLE
        and not node.maintenance
        and node.power_state is not None
        and node.instance_uuid is None
        and node.allocation_id is None
    )


def candidates(session: Session, req: Request) -> tuple[list[int], str | None]:
    """Ids of the nodes that may take ``req``, in the order to try them, or why there are none.

    The filters apply one after the other so that the error names the one
    that emptied the list: an operator reading it knows what to change.
    """
    rc = req.resource_class
    stmt = select(Node.id, Node.uuid, Node.name, Node.owner, Node.lessee).where(
        Node.provision_state == states.AVAILABLE,
        Node.maintenance.is_(False),
        Node.power_state.is_not(None),
        Node.instance_uuid.is_(None),
        Node.allocation_id.is_(None),
        Node.resource_class == rc,
    )
    rows = session.execute(stmt).all()
    if not rows:
        return [], f"no available nodes match the resource class {rc}"
    if req.candidate_nodes:
        wanted = set(req.candidate_nodes)
        rows = [r for r in rows if r.uuid in wanted]
        if not rows:
            return [], (
                "none of the requested candidate nodes are available and match "
                f"the resource class {rc}"
            )
    if req.owner is not None:
        # As Ironic: an owned allocation takes a node its owner owns or leases.
        rows = [r for r in rows if req.owner in (r.owner, r.lessee)]
        if not rows:
            return [], (
                f"no available nodes matching the resource class {rc} belong to owner "
                f"{req.owner} (as their owner or lessee)"
            )
    if req.traits:
        ids = [r.id for r in rows]
        having: set[int] = set()
        for batch in in_batches(ids):
            having.update(
                session.scalars(
                    select(NodeTrait.node_id)
                    .where(
                        NodeTrait.node_id.in_(batch),
                        NodeTrait.trait.in_(req.traits),
                    )
                    .group_by(NodeTrait.node_id)
                    .having(func.count() == len(set(req.traits)))
                )
            )
        rows = [r for r in rows if r.id in having]
        if not rows:
            return [], (
                f"no available nodes matching the resource class {rc} "
                f"have the traits {', '.join(sorted(req.traits))}"
            )
    first = [r.id for r in rows if req.name is not None and r.name == req.name]
    rest = [r.id for r in rows if r.id not in first]
    random.shuffle(rest)  # concurrent allocations spread over the nodes instead of colliding
    return first + rest, None
