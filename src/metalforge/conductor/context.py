"""What every conductor component shares: identity, database, drivers, settings."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from metalforge.config import ConductorSettings
from metalforge.db.engine import Database
from metalforge.drivers.hardware import DriverRegistry


class Waker:
    """In-process wake-up for workers: set when new work is queued."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def notify(self) -> None:
        self._event.set()

    def wait(self, timeout: float) -> None:
        self._event.wait(timeout)
        self._event.clear()


def project_of(lessee: str | None, owner: str | None) -> str:
    """Whose share of a conductor's workers work on a node draws on: its lessee's, else its
    owner's ("" for the deployment's own nodes)."""
    return lessee or owner or ""


class AbandonedCalls:
    """The calls this conductor stopped waiting for that still run, with their nodes'
    projects: each counts against its project's share of the workers."""

    def __init__(self) -> None:
        self._threads: dict[threading.Thread, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def add(self, thread: threading.Thread, what: str, project: str = "") -> None:
        with self._lock:
            self._threads[thread] = (what, project)

    def _prune(self) -> None:
        for thread in [t for t in self._threads if not t.is_alive()]:
            del self._threads[thread]

    def running(self) -> list[str]:
        """What each abandoned call still running was doing (ended ones are forgotten)."""
        with self._lock:
            self._prune()
            return sorted(what for what, _ in self._threads.values())

    def by_project(self) -> Counter[str]:
        """How many abandoned calls still run for each project."""
        with self._lock:
            self._prune()
            return Counter(project for _, project in self._threads.values())


class Heartbeats:
    """When this conductor last heartbeated, and whether it was cut off before that.

    A database outage stops every conductor's heartbeats alike. Once it ends,
    the first conductor back would see every peer's heartbeat older than
    ``heartbeat_timeout``, call them all dead and take their nodes and work
    over, running again the steps they were in the middle of. So, while this
    conductor cannot heartbeat, and for ``heartbeat_timeout`` after it could
    again, it calls a peer dead only if its heartbeat is older by the length
    of the outage too: time enough for every live peer to heartbeat again.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._grace = 0.0
        self._grace_until = 0.0

    def beat(self, interval: float, timeout: float) -> None:
        """A heartbeat was written now."""
        with self._lock:
            now = self._clock()
            gap = now - self._last
            if gap > 2 * interval:
                kept = self._grace if now < self._grace_until else 0.0
                self._grace, self._grace_until = max(gap, kept), now + timeout
            self._last = now

    def blind_for(self, interval: float, timeout: float) -> float:
        """Seconds to add to ``heartbeat_timeout`` now (see the class docstring)."""
        with self._lock:
            now = self._clock()
            behind = now - self._last
            extra = behind if behind > 2 * interval else 0.0
            if now < self._grace_until:
                extra = max(extra, self._grace)
            return extra


@dataclass
class ConductorContext:
    """Passed to every conductor function instead of globals."""

    hostname: str
    db: Database
    drivers: DriverRegistry
    settings: ConductorSettings
    stopping: threading.Event = field(default_factory=threading.Event)
    waker: Waker = field(default_factory=Waker)
    leaked_reservations: set[tuple[int, int]] = field(default_factory=set)
    """(node id, epoch) of reservations a failed release could not give back yet."""
    abandoned: AbandonedCalls = field(default_factory=AbandonedCalls)
    """Calls past their work item's deadline that still run (``deadlines``)."""
    beats: Heartbeats = field(default_factory=lambda: Heartbeats())

    @property
    def dead_after(self) -> dt.timedelta:
        """How old a peer's heartbeat must be for this conductor to call the peer dead:
        ``heartbeat_timeout``, and more while this conductor itself could not heartbeat,
        or has just come back from that (``Heartbeats``)."""
        settings = self.settings
        extra = self.beats.blind_for(settings.heartbeat_interval, settings.heartbeat_timeout)
        return dt.timedelta(seconds=settings.heartbeat_timeout + extra)
