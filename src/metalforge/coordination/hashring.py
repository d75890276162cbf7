"""Node affinity: a consistent hash ring over the live conductors.

Each conductor owns many points on a ring; a node belongs to the first point
after the hash of its UUID. When a conductor joins or leaves only its share
of nodes moves, so the others keep their warm state.

Part of coordination rather than of the conductor because the services read
it too (to queue a node's work for its conductor); it needs only
the database and the dead-after timeout.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import threading
import time
from collections.abc import Iterable

from metalforge.coordination.membership import LIVE_CONDUCTOR_ROWS, live_cutoff
from metalforge.db.engine import Database

POINTS_PER_HOST = 64


def _hash(value: str) -> int:
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Immutable ring over ``hosts``."""

    def __init__(self, hosts: Iterable[str]) -> None:
        self.hosts = sorted(set(hosts))
        points = sorted(
            (_hash(f"{host}-{i}"), host) for host in self.hosts for i in range(POINTS_PER_HOST)
        )
        self._keys = [p[0] for p in points]
        self._owners = [p[1] for p in points]

    def owner(self, key: str) -> str | None:
        if not self._keys:
            return None
        index = bisect.bisect(self._keys, _hash(key)) % len(self._keys)
        return self._owners[index]


class ConductorDirectory:
    """The live conductors, read from the database at most every ``ttl`` seconds."""

    def __init__(self, db: Database, dead_after: float, ttl: float = 2.0) -> None:
        self._db = db
        self._dead_after = dead_after
        self._ttl = ttl
        self._lock = threading.Lock()
        self._read_at: float | None = None
        """When the live conductors were last read (monotonic); none: never.

        Not 0.0: the monotonic clock counts from boot, so on a machine up for
        less than ``ttl`` a directory would think it had just read them."""
        self._rings: dict[tuple[str, str], HashRing] = {}
        self._live: list[tuple[str, str, list[str]]] = []

    def _refresh(self) -> None:
        now = time.monotonic()
        if self._read_at is not None and now - self._read_at < self._ttl:
            return
        cutoff = live_cutoff(self._db, dt.timedelta(seconds=self._dead_after))
        with self._db.read() as session:
            rows = session.execute(LIVE_CONDUCTOR_ROWS, {"b_cutoff": cutoff}).all()
        self._live = [(h, g, list(d)) for h, g, d in rows]
        self._rings = {}
        self._read_at = now

    def live(self) -> list[tuple[str, str, list[str]]]:
        """``(hostname, conductor_group, drivers)`` of every live conductor."""
        with self._lock:
            self._refresh()
            return list(self._live)

    def owner(self, node_uuid: str, driver: str, group: str) -> str | None:
        """The conductor that should handle the node, or None when none can."""
        return self.ring(driver, group).owner(node_uuid)

    def ring(self, driver: str, group: str) -> HashRing:
        """The ring of the live conductors serving ``driver`` in ``group``.

        A page of nodes asks once per (driver, group), not once per node.
        """
        with self._lock:
            self._refresh()
            ring = self._rings.get((driver, group))
            if ring is None:
                ring = HashRing(h for h, g, d in self._live if g == group and driver in d)
                self._rings[(driver, group)] = ring
            return ring

    def invalidate(self) -> None:
        """Make the next use read the database again, whatever the ``ttl`` says."""
        with self._lock:
            self._read_at = None
