"""Node history: every transition, every error, every step, in the node's own log.

Entries are written with one prebuilt Core ``INSERT`` (several entries of a
transaction in one ``executemany``) rather than through the ORM unit of work:
a flow writes a few entries in nearly every transaction it commits, and on
SQLite those transactions run one at a time, so what each one costs is what
bounds the lifecycle throughput of the whole service.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, TypedDict, Unpack

from sqlalchemy import insert
from sqlalchemy.orm import Session

from metalforge.db.models import NodeHistory, utcnow

INFO = "INFO"
WARNING = "WARNING"
ERROR = "ERROR"

MOVE = "provisioning"
"""The event type of every provision state change's entry (Ironic's word)."""
_INSERT = insert(NodeHistory)


def entry(
    node_id: int,
    event_type: str,
    event: str,
    *,
    severity: str = INFO,
    conductor: str | None = None,
    user: str | None = None,
    state: str | None = None,
    target: str | None = None,
    duration: float | None = None,
) -> dict[str, Any]:
    """One history row, to be written by ``write``."""
    return {
        "uuid": str(uuid.uuid4()),
        "node_id": node_id,
        "event_type": event_type,
        "event": event,
        "severity": severity,
        "conductor": conductor,
        "user": user,
        "state": state,
        "target_provision_state": target,
        "duration_seconds": duration,
        "created_at": utcnow(),
    }


def write(session: Session, entries: Sequence[dict[str, Any]]) -> None:
    """Write ``entries`` (from ``entry``), in order, in the caller's transaction."""
    if entries:
        session.connection().execute(_INSERT, list(entries))


class EntryDetails(TypedDict, total=False):
    """The optional fields of an entry, as ``entry`` and ``record`` take them."""

    severity: str
    conductor: str | None
    user: str | None
    state: str | None
    target: str | None
    duration: float | None


def record(
    session: Session, node_id: int, event_type: str, event: str, **details: Unpack[EntryDetails]
) -> None:
    """Add one history entry in the caller's transaction."""
    write(session, [entry(node_id, event_type, event, **details)])
