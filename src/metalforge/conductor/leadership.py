"""Singleton periodic tasks: each runs on exactly one live conductor at a time.

Every conductor campaigns for every role (one per task) each
``election_interval`` through its ``Elector`` (``metalforge.coordination.election``). A task runs
under the ``LeaderTerm`` it was elected with, and every write it makes
checks the term's epoch in the same transaction, so a leader that was paused
past its lease, or replaced while a round ran long, cannot write next to its
successor.

The election runs in a thread of its own, and each task in another, so a
slow task never delays the renewal of the other roles' leases. When the
membership shrinks, every member stands down from what it leads and the
roles are elected again. A leader whose task raises stands down (another
member may fare better). A member whose round cannot reach the backend
stops leading at once and tries again ``retry_interval`` later; after
``retry_count`` failed rounds in a row it asks its process to stop
(``on_fatal``) rather than act on a picture of the cluster it can no longer
check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy.orm import Session

from metalforge.conductor.context import ConductorContext
from metalforge.config import CoordinationSettings
from metalforge.coordination.election import Elector, LeaseLost, check_lease

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderTerm:
    """The term a singleton task runs in: its role as this member won it."""

    ctx: ConductorContext
    role: str
    member: str
    epoch: int

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A write transaction that commits only if this term still holds the role."""
        with self.ctx.db.write() as session:
            check_lease(session, self.role, self.member, self.epoch)
            yield session


@dataclass(frozen=True)
class SingletonTask:
    """A periodic task that must run on one process at a time."""

    role: str
    period: Callable[[ConductorContext], float]
    """Seconds between runs, read from the settings."""
    run: Callable[[LeaderTerm], object]
    """One run; its writes go through ``LeaderTerm.write`` so a lost term cannot write."""
    log_runs: bool = True
    """Log each run's start and end at info level (debug for a task run every few seconds)."""


class Leadership:
    """Campaigns for every role and runs the tasks of the roles this member leads."""

    def __init__(
        self,
        ctx: ConductorContext,
        elector: Elector,
        tasks: Sequence[SingletonTask],
        settings: CoordinationSettings,
        on_fatal: Callable[[str], None],
    ) -> None:
        self.ctx = ctx
        self.elector = elector
        self.tasks = tuple(tasks)
        self.settings = settings
        self.on_fatal = on_fatal
        self._leading: dict[str, int] = {}
        """Role → the epoch of the term this member holds it in."""
        self._last_run: dict[str, float] = {}
        self._members: frozenset[str] | None = None
        self._failures = 0
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def leads(self, role: str) -> bool:
        return self.term(role) is not None

    def term(self, role: str) -> LeaderTerm | None:
        """The term this member holds ``role`` in now, if it leads it."""
        with self._lock:
            epoch = self._leading.get(role)
        if epoch is None:
            return None
        return LeaderTerm(self.ctx, role, self.elector.member_id, epoch)

    def start(self) -> None:
        self.elector.start()
        loops: list[tuple[str, Callable[[], None]]] = [("leadership", self._election_loop)]
        for task in self.tasks:
            loops.append((f"singleton-{task.role}", self._task_loop(task)))
        for name, target in loops:
            thread = threading.Thread(target=target, name=f"conductor-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            self._leading.clear()
        try:
            self.elector.stop()
        except Exception:  # shutdown goes on whatever the backend raises
            LOG.warning("standing down at shutdown failed", exc_info=True)

    def _election_loop(self) -> None:
        while not self.ctx.stopping.is_set():
            answered = self.elect()
            wait = self.settings.election_interval if answered else self.elector.retry.interval
            self.ctx.stopping.wait(wait)

    def _task_loop(self, task: SingletonTask) -> Callable[[], None]:
        def loop() -> None:
            while not self.ctx.stopping.is_set():
                self.run_if_due(task)
                self.ctx.stopping.wait(self.settings.election_interval)

        return loop

    def round(self) -> None:
        """One election round, then every task that is due, in this thread."""
        if self.elect():
            for task in self.tasks:
                self.run_if_due(task)

    def elect(self) -> bool:
        """Notice a shrinking membership and campaign; whether the backend answered."""
        try:
            self._elect()
            self._failures = 0
            return True
        except Exception as exc:  # noqa: BLE001 - tooz backends raise anything; each counts
            self._failures += 1
            with self._lock:
                self._leading.clear()
            limit = self.elector.retry.count
            LOG.warning("coordination round failed (%d of %d): %s", self._failures, limit, exc)
            if self._failures >= limit:
                self.on_fatal(f"the coordination backend failed {self._failures} times in a row")
            return False

    def _elect(self) -> None:
        members = self.elector.members()
        if self._members is not None and self._members - members:
            LOG.info(
                "members left (%s): standing down for a new election",
                ", ".join(sorted(self._members - members)),
            )
            self._stand_down_all()
        self._members = members
        for task in self.tasks:
            epoch = self.elector.campaign(task.role)
            with self._lock:
                was = self._leading.get(task.role)
                if epoch is None:
                    self._leading.pop(task.role, None)
                else:
                    self._leading[task.role] = epoch
            if (epoch is None) != (was is None):
                LOG.info(
                    "%s %s the %s role",
                    self.elector.member_id,
                    "lost" if epoch is None else f"leads (epoch {epoch})",
                    task.role,
                )

    def _stand_down_all(self) -> None:
        with self._lock:
            roles = list(self._leading)
            self._leading.clear()
            self._last_run.clear()
        for role in roles:
            self.elector.stand_down(role)

    def run_if_due(self, task: SingletonTask) -> None:
        """Run ``task`` if this member leads its role and its period has passed."""
        term = self.term(task.role)
        if term is None:
            return
        with self._lock:
            last = self._last_run.get(task.role)
            if last is not None and time.monotonic() - last < task.period(self.ctx):
                return
            self._last_run[task.role] = time.monotonic()
        self._run(task, term)

    def _run(self, task: SingletonTask, term: LeaderTerm) -> None:
        # Each run is logged (what ran where is the record that one ran at a time), but a
        # task that runs every few seconds only at debug level.
        level = logging.INFO if task.log_runs else logging.DEBUG
        LOG.log(level, "singleton %s starts on %s", task.role, term.member)
        try:
            task.run(term)
        except LeaseLost as exc:
            LOG.warning("singleton %s on %s stopped: %s", task.role, term.member, exc)
            self._forget(term)
        except Exception:  # a singleton's bug must not end its thread
            LOG.exception("singleton %s failed on %s; standing down", task.role, term.member)
            self._forget(term)
            try:
                self.elector.stand_down(task.role)
            except Exception:  # whatever the backend raises, the lease runs out
                LOG.warning("standing down from %s failed", task.role, exc_info=True)
        finally:
            LOG.log(level, "singleton %s ends on %s", task.role, term.member)

    def _forget(self, term: LeaderTerm) -> None:
        """Stop counting on ``term`` (unless a later election already replaced it)."""
        with self._lock:
            if self._leading.get(term.role) == term.epoch:
                del self._leading[term.role]
