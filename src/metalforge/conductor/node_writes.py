"""Writing a node this conductor holds: the fence on every write, and what a write says.

Taking a reservation (``reservations.lock``) sets ``nodes.reservation`` to
this conductor and bumps the node's epoch, the fencing token. Every later
write to the node -- a task's saves, its agent-session writes, the
reservation's retake and release -- is conditional on both
(``HELD_BY_TASK``), so a conductor that lost its lock (it stalled and another
conductor took the node over) cannot overwrite anything. These functions
answer whether the node was still held; ``task.NodeTask`` turns a no into
``LockLost``.

What a write says is worked out before its transaction begins: on SQLite
that transaction holds the service's only write lock, so everything done
inside it is done while every other writer waits. History rows are stamped
with the node's state at the write; messages built from what drivers, BMCs
and agents said are scrubbed of the node's secrets; a failure names who
asked for the operation that failed.

Each write is a prebuilt Core statement on the transaction's connection,
not the ORM unit of work: on SQLite the service's write transactions run one
after another, so their length bounds how many nodes move per second.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, select, update
from sqlalchemy.orm import Session

from metalforge.conductor import history
from metalforge.db.engine import Database
from metalforge.db.models import Node, NodeHistory, utcnow
from metalforge.redaction import Scrubber

LOG = logging.getLogger(__name__)

_NODES = cast(Table, Node.__table__)

HELD_BY_TASK = and_(
    _NODES.c.id == bindparam("b_id"),
    _NODES.c.reservation == bindparam("b_host"),
    _NODES.c.epoch == bindparam("b_epoch"),
)
"""The fencing rule: the node is still this conductor's, at the epoch it took."""
_FENCE = select(_NODES.c.id).where(HELD_BY_TASK).with_for_update()
_SAVE = update(_NODES).where(HELD_BY_TASK)
# The SET clause of a save comes from the keys of its parameters.

_MESSAGE_COLUMNS = ("last_error", "maintenance_reason")
"""Columns holding messages built from what drivers, BMCs and agents said."""

Recorded = tuple[str, str, str, float | None]
"""An event a task recorded: its type, its text, its severity, how long it took."""


def still_held(session: Session, node: Node, holder: str) -> bool:
    """Whether ``holder`` still holds ``node`` at its epoch; if so the node's row stays
    locked until the transaction ends, so no takeover slips in before its write."""
    params = {"b_id": node.id, "b_host": holder, "b_epoch": node.epoch}
    return session.connection().execute(_FENCE, params).first() is not None


def save_columns(session: Session, node: Node, holder: str, changes: dict[str, Any]) -> bool:
    """Write ``changes`` to ``node`` if ``holder`` still holds it at its epoch; whether it did."""
    changes.setdefault("updated_at", utcnow())
    result = session.connection().execute(
        _SAVE, {**changes, "b_id": node.id, "b_host": holder, "b_epoch": node.epoch}
    )
    return result.rowcount == 1


def history_rows(node: Node, recorded: Iterable[Recorded], conductor: str) -> list[dict[str, Any]]:
    """The recorded events as history rows, stamped with the node's state now."""
    return [
        history.entry(
            node.id,
            event_type,
            event,
            severity=severity,
            conductor=conductor,
            state=node.provision_state,
            target=node.target_provision_state,
            duration=duration,
        )
        for event_type, event, severity, duration in recorded
    ]


def scrub_messages(
    db: Database,
    node: Node,
    changes: dict[str, Any],
    entries: list[dict[str, Any]],
    note: str | None,
) -> str | None:
    """Scrub the messages in ``changes`` and ``entries`` of the node's secrets (in place),
    name the requester in a new ``last_error``; the transition's ``note``, scrubbed."""
    scrub = Scrubber(node.driver_info, node.instance_info, node.driver_internal_info)
    for key in _MESSAGE_COLUMNS:
        if isinstance(changes.get(key), str):
            changes[key] = scrub(changes[key])
    if changes.get("last_error"):
        changes["last_error"] = _with_requester(db, node, changes["last_error"])
    for entry in entries:
        entry["event"] = scrub(entry["event"])
    return scrub(note) if note else note


def _with_requester(db: Database, node: Node, message: str) -> str:
    """A failure names who asked for the operation that failed, and is logged so.

    The requester is the user of the node's latest history entry written
    for a request: read only when a failure is recorded, never on the
    way to success. Without authentication (``noauth``) history names
    nobody, and neither does the failure.
    """
    with db.read() as session:
        requester = session.scalar(
            select(NodeHistory.user)
            .where(NodeHistory.node_id == node.id, NodeHistory.user.is_not(None))
            .order_by(NodeHistory.id.desc())
            .limit(1)
        )
    LOG.warning("node %s: %s (requested by %s)", node.uuid, message, requester or "nobody")
    if requester is None or "(requested by " in message:
        return message
    return f"{message} (requested by {requester})"
