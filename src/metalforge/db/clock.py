"""Time as the database tells it, for whatever several hosts compare.

A conductor is dead when its heartbeat is older than ``heartbeat_timeout``,
and a work item's lease is over when its expiry is past. Both are written by
one host and judged by another: with each host's own clock, one running a
minute fast would declare every other conductor dead and take their nodes.
So these timestamps come from one clock, the database's. Asking the database
for every timestamp would cost a round trip each; instead the offset between
the local clock and the database's is measured now and then (PostgreSQL's
``statement_timestamp()``, halfway through the round trip) and added to the
local clock. SQLite lives on one host: its clock is the local one.

The local source is injectable, so tests can run a host whose clock is off.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import text

from metalforge.db.models import utcnow

if TYPE_CHECKING:
    from metalforge.db.engine import Database

RESYNC_SECONDS = 60.0
"""How often the offset is measured again (clocks drift slowly; a step is caught soon)."""

_DB_NOW = text("SELECT statement_timestamp()")


class DatabaseClock:
    """``now()``: aware UTC on the database's clock."""

    def __init__(self, db: Database, local: Callable[[], dt.datetime] = utcnow) -> None:
        self._db = db
        self._local = local
        self._offset = dt.timedelta(0)
        self._synced_at: float | None = None
        self._lock = threading.Lock()

    @property
    def offset(self) -> dt.timedelta:
        """Database time minus local time, as last measured."""
        return self._offset

    def now(self) -> dt.datetime:
        if not self._db.is_sqlite:
            synced = self._synced_at
            if synced is None or time.monotonic() - synced > RESYNC_SECONDS:
                self.sync()
        return self._local() + self._offset

    def sync(self) -> None:
        """Measure the offset now (a no-op on SQLite); keeps the last one if the database fails."""
        if self._db.is_sqlite:
            return
        with self._lock:
            before = self._local()
            with self._db.snapshot(single_statement=True) as connection:
                database = connection.scalar(_DB_NOW)
            after = self._local()
            if isinstance(database, dt.datetime):
                self._offset = database - (before + (after - before) / 2)
            self._synced_at = time.monotonic()
