"""The fencing rule for what the API changes on a node.

Every write a request makes to a node compares the epoch it read and bumps
it, and only while no one holds the node's reservation. A conductor that
takes the node bumps the epoch too, so whichever of the two comes second
finds another epoch and gives up instead of overwriting the other: the
request answers 409, the conductor's task ends with ``LockLost``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from metalforge.conductor import history
from metalforge.db.engine import now_for
from metalforge.db.models import Node, utcnow
from metalforge.errors import NodeLocked, conflict

API_HOLD_PREFIX = "api@"
_UNTIL = " until "


def api_hold(hostname: str, until: dt.datetime) -> str:
    """The reservation a synchronous API call takes: who holds it, and until when at most."""
    return f"{API_HOLD_PREFIX}{hostname}{_UNTIL}{until.astimezone(dt.UTC).isoformat()}"


def _expired_api_hold(holder: str, now: dt.datetime) -> bool:
    if not holder.startswith(API_HOLD_PREFIX) or _UNTIL not in holder:
        return False
    try:
        until = dt.datetime.fromisoformat(holder.rsplit(_UNTIL, 1)[1])
    except ValueError:
        return False
    return until.tzinfo is not None and until < now


def check_unlocked(session: Session, node: Node) -> None:
    """409 (retried briefly by the API) while a conductor or a request holds the node.

    A hold an API call took and kept past its deadline was left by a process
    that died mid-call (conductors take it over at once, as any holder that
    is no live conductor): it is cleared here, fenced, so the request goes on.
    """
    holder = node.reservation
    if holder is None:
        return
    if not _expired_api_hold(holder, now_for(session)):
        raise NodeLocked(node.uuid, holder)
    result = session.execute(
        update(Node)
        .where(Node.id == node.id, Node.epoch == node.epoch, Node.reservation == holder)
        .values(reservation=None, epoch=Node.epoch + 1)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NodeLocked(node.uuid, holder)
    node.reservation, node.epoch = None, node.epoch + 1


UPDATED_MEANWHILE = "changed while it was being updated"
REQUEST_RACED = "changed while the request was processed"


def update_node(
    session: Session, node: Node, changes: Mapping[str, Any], *, race: str = UPDATED_MEANWHILE
) -> None:
    """Write ``changes`` to ``node`` if it is still as read and unreserved; bump its epoch.

    ``node`` keeps the values it was read with. The statement is Core, so
    the caller's session does not flush or reload the object. A lost race
    answers 409 "Node ... <race>; please retry."
    """
    result = session.execute(
        update(Node)
        .where(Node.id == node.id, Node.epoch == node.epoch, Node.reservation.is_(None))
        .values(**changes, epoch=Node.epoch + 1, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise conflict(f"Node {node.uuid} {race}; please retry.")


def delete_node_row(session: Session, node: Node) -> None:
    """Delete ``node``'s row if it is still as read and unreserved."""
    result = session.execute(
        delete(Node)
        .where(Node.id == node.id, Node.epoch == node.epoch, Node.reservation.is_(None))
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise conflict(f"Node {node.uuid} changed while it was being deleted; please retry.")


def record(
    session: Session,
    node: Node,
    event: str,
    note: str,
    actor: str | None,
    severity: str = history.INFO,
) -> None:
    """A history entry for what ``actor`` did to ``node``, in the caller's transaction."""
    history.record(
        session,
        node.id,
        event,
        note,
        severity=severity,
        state=node.provision_state,
        target=node.target_provision_state,
        user=actor,
    )
