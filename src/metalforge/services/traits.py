"""A node's traits: listed, set, added and removed by operators, fenced like every node write.

Traits decide which nodes an allocation may pick and which deploy templates
run on a node. A change made while a conductor holds the node would race
what that conductor decided from the traits it read, so a held node answers
409 (after the API's short lock wait), and every change compares and bumps
the node's epoch: a conductor that took the node in between, or a request
that changed it, makes this one give up instead of writing over it. History
names who changed the traits.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from metalforge.db.models import Node, NodeTrait
from metalforge.errors import bad_request, not_found
from metalforge.services import fencing, lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version

MAX_TRAITS = 50
"""Ironic's limit on one node's traits (as the replace body's schema says too)."""


def list_traits(svc: Services, ident: str, version: Version) -> list[str]:
    """The node's traits, sorted."""
    with svc.db.read() as session:
        node = lookup.find_node(session, ident, version)
        return sorted(t.trait for t in node.traits)


def set_traits(
    svc: Services, ident: str, version: Version, traits: Iterable[str], *, actor: str | None
) -> None:
    """Replace every trait of the node with ``traits`` (checked by the caller)."""
    wanted = sorted(set(traits))
    with svc.db.write() as session:
        node = _writable_node(session, ident, version)
        session.execute(delete(NodeTrait).where(NodeTrait.node_id == node.id))
        session.add_all(NodeTrait(node_id=node.id, trait=t) for t in wanted)
        _changed(session, node, f"traits set to {', '.join(wanted) or 'none'}", actor)


def add_trait(
    svc: Services, ident: str, version: Version, trait: str, *, actor: str | None
) -> None:
    """Add ``trait`` to the node; a trait it already has changes nothing (no epoch bump)."""
    with svc.db.write() as session:
        node = _writable_node(session, ident, version)
        existing = set(session.scalars(select(NodeTrait.trait).where(NodeTrait.node_id == node.id)))
        if trait in existing:
            return
        if len(existing) >= MAX_TRAITS:
            raise bad_request(
                f"Could not add trait {trait} to node {node.uuid}: a node "
                f"may have at most {MAX_TRAITS} traits"
            )
        session.add(NodeTrait(node_id=node.id, trait=trait))
        _changed(session, node, f"trait {trait} added", actor)


def remove_trait(
    svc: Services, ident: str, version: Version, trait: str, *, actor: str | None
) -> None:
    """Remove ``trait`` from the node; 404 when the node does not have it."""
    with svc.db.write() as session:
        node = _writable_node(session, ident, version)
        result = session.execute(
            delete(NodeTrait).where(NodeTrait.node_id == node.id, NodeTrait.trait == trait)
        )
        if result.rowcount == 0:  # type: ignore[attr-defined]
            raise not_found(f"Node {node.uuid} doesn't have a trait '{trait}'")
        _changed(session, node, f"trait {trait} removed", actor)


def remove_traits(svc: Services, ident: str, version: Version, *, actor: str | None) -> None:
    """Remove every trait of the node (a node without traits is still touched)."""
    with svc.db.write() as session:
        node = _writable_node(session, ident, version)
        session.execute(delete(NodeTrait).where(NodeTrait.node_id == node.id))
        _changed(session, node, "all traits removed", actor)


def _writable_node(session: Session, ident: str, version: Version) -> Node:
    """The node under a row lock, refused (``NodeLocked``) while someone holds it."""
    node = lookup.find_node(session, ident, version, for_update=True)
    fencing.check_unlocked(session, node)
    return node


def _changed(session: Session, node: Node, note: str, actor: str | None) -> None:
    """Bump the node's epoch (and ``updated_at``) if it is still as read; record who did what.

    The traits live in their own table, so the node row itself changes only
    by this: it is what makes a concurrent holder or writer notice.
    """
    fencing.update_node(session, node, {})
    fencing.record(session, node, "traits", note, actor)
