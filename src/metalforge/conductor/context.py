"""What every conductor component shares: identity, database, drivers, settings."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
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

    @property
    def dead_after(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.settings.heartbeat_timeout)
