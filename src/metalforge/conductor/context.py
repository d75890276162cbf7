"""What every conductor component shares: identity, database, drivers, settings."""

from __future__ import annotations

import datetime as dt
import threading
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


class AbandonedCalls:
    """The calls this conductor stopped waiting for that still run."""

    def __init__(self) -> None:
        self._threads: dict[threading.Thread, str] = {}
        self._lock = threading.Lock()

    def add(self, thread: threading.Thread, what: str) -> None:
        with self._lock:
            self._threads[thread] = what

    def running(self) -> list[str]:
        """What each abandoned call still running was doing (ended ones are forgotten)."""
        with self._lock:
            for thread in [t for t in self._threads if not t.is_alive()]:
                del self._threads[thread]
            return sorted(self._threads.values())


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
