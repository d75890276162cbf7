"""The node event log the live stream reads (rows written by the triggers of migration 0012).

Each row says "this node changed" (or was deleted); what it changed to is
read from the node itself when the event is sent, so a burst of changes to
one node is one event with its latest state.

Rows become visible at commit, and on PostgreSQL not in id order: a
transaction that took id 10 may commit after the one that took id 11. A
reader that only asks for ids above the highest it saw could skip 10 for
good, so on PostgreSQL the reader also re-reads the last ``LATE_WINDOW``
seconds and drops the ids it already had (``EventCursor``). SQLite commits
one transaction at a time, in id order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, delete, func, or_, select

from metalforge.db.engine import Database
from metalforge.db.models import NodeEvent
from metalforge.db.notify import Listener

CHANNEL = "metalforge_node_events"
"""The channel the triggers of migration 0012 notify (PostgreSQL)."""

LATE_WINDOW = 30.0
"""Seconds within which a PostgreSQL event may still appear below the highest id seen."""

BATCH = 5000


@dataclass(frozen=True, slots=True)
class EventRow:
    id: int
    node_uuid: str
    deleted: bool
    at: float


def _rows(connection: Connection, *conditions: object) -> list[EventRow]:
    query = (
        select(NodeEvent.id, NodeEvent.node_uuid, NodeEvent.deleted, NodeEvent.at)
        .where(*conditions)  # type: ignore[arg-type]
        .order_by(NodeEvent.id)
        .limit(BATCH)
    )
    return [EventRow(int(r[0]), r[1], bool(r[2]), float(r[3])) for r in connection.execute(query)]


def after(connection: Connection, event_id: int) -> list[EventRow]:
    """Events with an id above ``event_id``, oldest first (at most ``BATCH``)."""
    return _rows(connection, NodeEvent.id > event_id)


def last_id(connection: Connection) -> int:
    return int(connection.scalar(select(func.coalesce(func.max(NodeEvent.id), 0))) or 0)


def first_id(connection: Connection) -> int | None:
    value = connection.scalar(select(func.min(NodeEvent.id)))
    return None if value is None else int(value)


def prune(connection: Connection, before: float) -> int:
    """Drop events older than ``before`` (epoch seconds); returns how many."""
    return int(connection.execute(delete(NodeEvent).where(NodeEvent.at < before)).rowcount)


class EventCursor:
    """Reads each committed event once, in spite of PostgreSQL's out-of-order commits."""

    def __init__(self, db: Database, start: int) -> None:
        self._db = db
        self._highest = start
        self._seen: dict[int, float] = {}
        self._late = not db.is_sqlite

    def read(self) -> list[EventRow]:
        with self._db.snapshot() as connection:
            if not self._late:
                rows = after(connection, self._highest)
            else:
                since = self._db.now().timestamp() - LATE_WINDOW
                rows = _rows(connection, or_(NodeEvent.id > self._highest, NodeEvent.at >= since))
                rows = [r for r in rows if r.id > self._highest or r.id not in self._seen]
                self._seen = {i: at for i, at in self._seen.items() if at >= since - 1.0}
                self._seen.update((r.id, r.at) for r in rows)
        if rows:
            self._highest = max(self._highest, max(r.id for r in rows))
        return rows

    @property
    def highest(self) -> int:
        return self._highest


class Wakeups:
    """Calls ``wake`` soon after any committed write may have added events.

    PostgreSQL: the triggers' NOTIFY, from every process. SQLite: this
    process's own commits; other processes' are found by the reader's poll.
    """

    def __init__(self, db: Database, wake: Callable[[], None]) -> None:
        self._db = db
        self._wake = wake
        self._listener: Listener | None = None
        self._lock = threading.Lock()
        if db.is_sqlite:
            db.after_commit(wake)

    def start(self) -> None:
        with self._lock:
            if not self._db.is_sqlite and self._listener is None:
                self._listener = Listener(self._db.url, self._wake, channel=CHANNEL)
                self._listener.start()

    def stop(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
