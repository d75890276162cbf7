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
import logging
import threading
import time
from collections.abc import Callable

from metalforge.db.models import utcnow

RESYNC_SECONDS = 60.0
"""How often the offset is measured again (clocks drift slowly; a step is caught soon)."""
RETRY_SECONDS = 5.0
"""How soon a measurement the database could not answer is tried again."""
LOG = logging.getLogger(__name__)


class DatabaseClock:
    """``now()``: aware UTC on the database's clock.

    ``database_time`` asks the database for its time (one round trip); none:
    the database shares this host's clock (SQLite).
    """

    def __init__(
        self,
        database_time: Callable[[], dt.datetime] | None,
        local: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        self._database_time = database_time
        self._local = local
        self._offset = dt.timedelta(0)
        self._synced_at: float | None = None
        self._lock = threading.Lock()

    @property
    def offset(self) -> dt.timedelta:
        """Database time minus local time, as last measured."""
        return self._offset

    def now(self) -> dt.datetime:
        if self._database_time is not None and self._due():
            # Only the first measurement is waited for: later, while one thread
            # measures, the others go on with the last offset.
            self._resync(wait=self._synced_at is None)
        return self._local() + self._offset

    def _due(self) -> bool:
        synced = self._synced_at
        return synced is None or time.monotonic() - synced > RESYNC_SECONDS

    def _resync(self, *, wait: bool) -> None:
        if not self._lock.acquire(blocking=wait):
            return
        try:
            if self._due():  # not measured by another thread meanwhile
                self._measure()
        finally:
            self._lock.release()

    def sync(self) -> None:
        """Measure the offset now (a no-op on SQLite).

        If the database cannot answer, the last offset stands and the next
        call tries again a few seconds later: telling the time must not fail
        a step because of a passing database hiccup.
        """
        if self._database_time is None:
            return
        with self._lock:
            self._measure()

    def _measure(self) -> None:
        """One measurement; the caller holds ``_lock``."""
        assert self._database_time is not None
        before = self._local()
        try:
            database = self._database_time()
        except Exception:  # noqa: BLE001 - a source of any kind: telling the time must not fail
            LOG.warning("could not read the database's clock; keeping the last offset")
            self._synced_at = time.monotonic() - RESYNC_SECONDS + RETRY_SECONDS
            return
        after = self._local()
        self._offset = database - (before + (after - before) / 2)
        self._synced_at = time.monotonic()
