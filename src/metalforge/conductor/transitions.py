"""The one way a node's provision state changes.

``apply`` checks the state table, writes the new state with a compare on the
old state and the node's epoch (and on who holds the reservation), bumps the
epoch and records a history event, all in the caller's transaction. Two
concurrent writers that read the same row cannot both win: the second
``UPDATE`` matches no row and raises ``TransitionConflict``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from metalforge import states
from metalforge.conductor import history
from metalforge.db.models import Node, utcnow


class TransitionConflict(RuntimeError):
    """The node changed (or was locked) between reading and writing it."""


@dataclass(frozen=True, slots=True)
class Moved:
    """Result of a successful transition."""

    provision_state: str
    target_provision_state: str | None
    epoch: int


def apply(
    session: Session,
    node: Node,
    event: str,
    *,
    holder: str | None = None,
    changes: dict[str, Any] | None = None,
    conductor: str | None = None,
    note: str | None = None,
    severity: str = history.INFO,
) -> Moved:
    """Move ``node`` through ``event``; ``node`` holds the values read before.

    ``holder`` is the conductor holding the node's reservation (``None``: the
    API, which may only act on an unlocked node). ``changes`` are other
    columns written in the same statement (``last_error``, step fields...).
    On success ``node`` is updated in memory too.

    Raises ``states.InvalidTransition`` when the table forbids the move and
    ``TransitionConflict`` when the row is not as it was read.
    """
    transition = states.find(node.provision_state, event)
    new_state, new_target = states.resolve(transition, node.target_provision_state)
    values: dict[str, Any] = {
        "provision_state": new_state,
        "target_provision_state": new_target,
        "provision_updated_at": utcnow(),
        "epoch": node.epoch + 1,
        "updated_at": utcnow(),
        **(changes or {}),
    }
    reservation = Node.reservation.is_(None) if holder is None else Node.reservation == holder
    result = session.execute(
        update(Node)
        .where(
            Node.id == node.id,
            Node.provision_state == node.provision_state,
            Node.epoch == node.epoch,
            reservation,
        )
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise TransitionConflict(
            f"node {node.uuid} changed while moving from {node.provision_state!r} by {event!r}"
        )
    old_state = node.provision_state
    for key, value in values.items():
        set_committed_value(node, key, value)
    text = f"{old_state} -> {new_state} ({event})"
    if note:
        text = f"{text}: {note}"
    history.record(
        session,
        node.id,
        "provisioning",
        text,
        severity=severity,
        conductor=conductor,
        state=new_state,
        target=new_target,
    )
    return Moved(new_state, new_target, node.epoch)
