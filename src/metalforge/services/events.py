"""The live event stream's source: one reader per API process, fanning out to its clients.

``GET /v1/events`` clients subscribe here. A single thread per process reads
the node event log (``db.events``) when a commit may have added to it (a
PostgreSQL notification, this process's own SQLite commit, or a poll every
``POLL`` seconds for what neither reports), reads the changed nodes' state
and progress in one pass, and hands each client the events it may see. A
client that falls ``QUEUE_LIMIT`` events behind is told to ``resync``
(re-read what it shows) instead of holding memory for it. The thread runs
only while someone listens; a conductor prunes old events
(``conductor.housekeeping``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, select

from metalforge.db import events as event_log
from metalforge.db import flow_progress
from metalforge.db.engine import Database
from metalforge.db.models import Node
from metalforge.services.progress import progress_of

LOG = logging.getLogger(__name__)

POLL = 1.0
"""Seconds between reads when no wake-up came (other processes' SQLite writes)."""
QUEUE_LIMIT = 1000
"""Events a client may fall behind by before it is told to resync."""

SNAPSHOT_FIELDS = (
    "uuid",
    "name",
    "driver",
    "provision_state",
    "target_provision_state",
    "power_state",
    "target_power_state",
    "maintenance",
    "maintenance_reason",
    "fault",
    "last_error",
    "conductor_group",
    "resource_class",
    "owner",
    "lessee",
    "instance_uuid",
    "updated_at",
)
"""What a ``node`` event carries of the node (no secrets: no driver or instance info)."""

NODE = "node"
NODE_DELETED = "node_deleted"
RESYNC = "resync"
READY = "ready"
"""Sent once a stream is subscribed (after any backlog): from here it misses nothing."""


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """One event for clients: ``kind`` is ``node``, ``node_deleted`` or ``resync``."""

    id: int
    kind: str
    node_uuid: str
    owner: str | None
    lessee: str | None
    data: dict[str, Any]


class Subscription:
    """One client's queue, filled from the reader's thread, drained on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, caller: str = "") -> None:
        self.loop = loop
        self.caller = caller
        """Whose stream it is (its project, else its user): each caller has a share."""
        self.queue: asyncio.Queue[NodeEvent] = asyncio.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self.overflowed = False

    def offer(self, event: NodeEvent) -> None:
        """From the reader's thread: queue ``event``, or mark the client for a resync."""
        with self._lock:
            if self._pending >= QUEUE_LIMIT:
                self.overflowed = True
                return
            self._pending += 1
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # its event loop closed: the client is gone
            with self._lock:
                self._pending -= 1

    def taken(self) -> None:
        with self._lock:
            self._pending -= 1


class EventHub:
    """This process's reader of the node event log and its subscribers."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._subscribers: set[Subscription] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._wakeups = event_log.Wakeups(db, self._wake.set)
        self._cursor: event_log.EventCursor | None = None
        """The running reader's cursor; ``None`` while nobody listens."""

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def streams_of(self, caller: str) -> int:
        """The subscriptions ``caller`` holds now."""
        with self._lock:
            return sum(1 for s in self._subscribers if s.caller == caller)

    def subscribe(
        self, loop: asyncio.AbstractEventLoop, caller: str = ""
    ) -> tuple[Subscription, int]:
        """Add a subscriber, starting the reader if it is the first (blocking: run it in a
        worker thread); returns it with the id from which it gets every event. Raises,
        having added nothing, when the log cannot be read."""
        subscription = Subscription(loop, caller)
        with self._lock:
            if self._cursor is None:
                with self._db.snapshot(single_statement=True) as connection:
                    start = event_log.last_id(connection)
                self._wakeups.start()
                self._cursor = event_log.EventCursor(self._db, start)
                threading.Thread(
                    target=self._run, args=(self._cursor,), name="event-reader", daemon=True
                ).start()
            self._subscribers.add(subscription)
            return subscription, self._cursor.highest

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscribers.discard(subscription)
        self._wake.set()  # the reader stops when nobody is left

    def backlog(self, after_id: int) -> list[NodeEvent]:
        """What a client that last saw ``after_id`` missed: the nodes' current state, or
        one ``resync`` when the log no longer reaches back that far or holds more than
        ``BACKLOG_LIMIT`` events since (re-reading the nodes is cheaper then)."""
        with self._db.snapshot() as connection:
            first = event_log.first_id(connection)
            newest = event_log.last_id(connection)
            resync = [NodeEvent(newest, RESYNC, "", None, None, {})]
            if first is not None and first > after_id + 1:
                return resync
            rows = event_log.after(connection, after_id)
            if len(rows) >= event_log.BATCH:
                return resync
            if not self._db.is_sqlite:
                # Ids commit out of order here: what committed late below the client's
                # last id may be news to it (sent again otherwise: harmless, it is state).
                seen_at = event_log.at_of(connection, after_id)
                if seen_at is not None:
                    since = seen_at - event_log.LATE_WINDOW
                    rows = [*event_log.recent_below(connection, after_id, since), *rows]
        return self._events(rows)

    def _run(self, cursor: event_log.EventCursor) -> None:
        while True:
            with self._lock:
                if not self._subscribers:
                    self._cursor = None
                    stopping = self._wakeups.detach()
                    break
            rows: list[event_log.EventRow] = []
            try:
                # A subscriber added while this reads is in the copy below, or learns
                # the highest id this read reached: either way it misses nothing after
                # the id ``subscribe`` gave it.
                rows = cursor.read()
                events = self._events(rows) if rows else []
            except Exception:  # the one reader of every stream outlives any failure
                LOG.warning("could not read the node event log; retrying", exc_info=True)
                # What the cursor passed may not have been sent: have everyone re-read.
                events = [NodeEvent(cursor.highest, RESYNC, "", None, None, {})] if rows else []
                time.sleep(POLL)
            with self._lock:
                subscribers = list(self._subscribers)
            for subscription in subscribers:
                for event in events:
                    subscription.offer(event)
            if not rows:
                self._wake.wait(POLL)
                self._wake.clear()
        stopping()

    def _events(self, rows: Iterable[event_log.EventRow]) -> list[NodeEvent]:
        """One event per node changed (its latest state), in the order of their last change."""
        latest: dict[str, event_log.EventRow] = {}
        for row in rows:
            latest.pop(row.node_uuid, None)
            latest[row.node_uuid] = row
        if not latest:
            return []
        with self._db.snapshot() as connection:
            nodes = _read_nodes(connection, [u for u, r in latest.items() if not r.deleted])
            now = self._db.now()
            found = []
            for uuid, row in latest.items():
                node = nodes.get(uuid)
                if node is None:
                    found.append(NodeEvent(row.id, NODE_DELETED, uuid, None, None, {"uuid": uuid}))
                    continue
                values, progress = node
                data = {key: _plain(values[key]) for key in SNAPSHOT_FIELDS}
                shown = progress_of(connection, SimpleNamespace(**values), progress, now)
                data["progress"] = shown.to_json()
                found.append(NodeEvent(row.id, NODE, uuid, values["owner"], values["lessee"], data))
        return found


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.datetime) else value


_COLUMNS = [getattr(Node, name) for name in ("id", *SNAPSHOT_FIELDS)]


def _read_nodes(
    connection: Connection, uuids: list[str]
) -> dict[str, tuple[dict[str, Any], flow_progress.FlowProgress]]:
    found: dict[str, tuple[dict[str, Any], flow_progress.FlowProgress]] = {}
    for start in range(0, len(uuids), 500):
        rows = connection.execute(
            select(*_COLUMNS).where(Node.uuid.in_(uuids[start : start + 500]))
        )
        values = [dict(row._mapping) for row in rows]
        progress = flow_progress.load_many(connection, [v["id"] for v in values])
        for value in values:
            found[value["uuid"]] = (value, progress.get(value["id"], flow_progress.NO_FLOW))
    return found
