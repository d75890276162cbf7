"""The node event log the live stream reads (rows written by the triggers of migration 0012).

Each row says "this node changed" (or was deleted); what it changed to is
read from the node itself when the event is sent, so a burst of changes to
one node is one event with its latest state.

Rows become visible at commit, and on PostgreSQL not in id order: a
transaction that took id 10 may commit after the one that took id 11. A
reader that only asks for ids above the highest it saw could skip 10 for
good, so on PostgreSQL the reader keeps looking for the ids it found
missing for ``LATE_WINDOW`` seconds (``EventCursor``): a transaction that
commits more than that after its first watched write is not streamed (its
next change is). SQLite commits one transaction at a time, in id order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, delete, func, select

from metalforge.db.engine import Database
from metalforge.db.models import NodeEvent
from metalforge.db.notify import Listener

CHANNEL = "metalforge_node_events"
"""The channel the triggers of migration 0012 notify (PostgreSQL)."""

LATE_WINDOW = 30.0
"""Seconds a PostgreSQL event may still appear below the highest id read."""

BATCH = 5000
MAX_HOLES = 10_000
"""Holes looked for at most, below the newest id of a read (a sequence that jumped far
ahead, after many rolled-back writes, is not searched id by id)."""


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
    """Drop events older than ``before`` (epoch seconds), always keeping the newest one:
    it marks how far the log has gone, so a client resuming from an id it pruned is told
    to resync even when nothing happened since. Returns how many went."""
    newest = select(func.max(NodeEvent.id)).scalar_subquery()
    return int(
        connection.execute(
            delete(NodeEvent).where(NodeEvent.at < before, NodeEvent.id < newest)
        ).rowcount
    )


def at_of(connection: Connection, event_id: int) -> float | None:
    """When event ``event_id`` was written (``None`` once pruned, or never written)."""
    value = connection.scalar(select(NodeEvent.at).where(NodeEvent.id == event_id))
    return None if value is None else float(value)


def window(connection: Connection, event_ids: Iterable[int]) -> list[EventRow]:
    """The events among ``event_ids`` that are visible now."""
    wanted = list(event_ids)
    if not wanted:
        return []
    return _rows(connection, NodeEvent.id.in_(wanted))


def recent_below(connection: Connection, event_id: int, since: float) -> list[EventRow]:
    """Events at or below ``event_id`` written since ``since``: what a client that last
    saw ``event_id`` may have missed on PostgreSQL, where ids commit out of order."""
    return _rows(connection, NodeEvent.id <= event_id, NodeEvent.at >= since)


class EventCursor:
    """Reads each committed event once, in spite of PostgreSQL's out-of-order commits.

    Ids below the highest one read that were not there yet are holes: a
    transaction still running (or one that rolled back). Only holes can
    appear later, so each read looks for new ids above the highest and for
    the holes of the last ``LATE_WINDOW`` seconds, by id. SQLite commits in
    id order and has none.
    """

    def __init__(self, db: Database, start: int) -> None:
        self._db = db
        self._highest = start
        self._holes: dict[int, float] = {}
        """Missing ids, and when (monotonic) they were found missing."""

    def read(self) -> list[EventRow]:
        with self._db.snapshot() as connection:
            rows = after(connection, self._highest)
            late = window(connection, self._holes) if self._holes else []
        now = time.monotonic()
        for row in late:
            self._holes.pop(row.id, None)
        self._holes = {i: t for i, t in self._holes.items() if now - t < LATE_WINDOW}
        if rows:
            if not self._db.is_sqlite:
                present = {r.id for r in rows}
                first = max(self._highest + 1, rows[-1].id - MAX_HOLES)
                for missing in range(first, rows[-1].id):
                    if missing not in present:
                        self._holes[missing] = now
            self._highest = rows[-1].id
        return sorted([*late, *rows], key=lambda r: r.id)

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

    def detach(self) -> Callable[[], None]:
        """Stop listening: returns what finishes it (joining the listener's thread), for
        the caller to run once it holds no lock a new listener's start may need."""
        with self._lock:
            listener, self._listener = self._listener, None
        return (lambda: None) if listener is None else listener.stop
