"""Singleton periodic tasks: each runs on exactly one live conductor at a time.

Every conductor campaigns for every role (one per task) each
``election_interval``; the backend grants a role to one member, for a lease
it must keep renewing. Two backends:

- ``SqlElector`` (the default, on the service's own database, SQLite too):
  one ``leader_leases`` row per role with its holder, an epoch bumped at
  each change of holder, and an expiry. A member takes a role that is free,
  expired, or held by a conductor no longer alive, in one locked
  read-then-write; the members are the live conductors.
- ``ToozElector`` for operators who run Redis (or another tooz backend with
  groups and locks, whose client library they install): a tooz group
  for membership and one tooz lock per role (the lock's own expiry is the
  lease, refreshed by the coordinator's heartbeat and checked each round).
  A backend that cannot do both refuses to start: it never degrades to
  every member leading.

When the membership shrinks, every member stands down from what it leads
and the roles are elected again. A leader whose task raises stands down
(another member may fare better); a member that cannot reach the backend
``retry_count`` rounds in a row stops leading and asks its process to stop
(``on_fatal``) rather than act on a picture of the cluster it can no longer
check.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.orm import Session

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.reservations import LIVE_CONDUCTORS, live_cutoff
from metalforge.config import CoordinationSettings
from metalforge.db.engine import Database, now_for
from metalforge.db.models import LeaderLease

LOG = logging.getLogger(__name__)


class LeadershipUnavailable(RuntimeError):
    """The coordination backend cannot elect leaders; the conductor must not start."""


class Elector(ABC):
    """One backend's election: which member leads each role."""

    member_id: str

    @abstractmethod
    def start(self) -> None:
        """Connect and join the membership (``LeadershipUnavailable`` if it cannot elect)."""

    @abstractmethod
    def campaign(self, role: str) -> bool:
        """Take or keep ``role``; whether this member leads it now."""

    @abstractmethod
    def stand_down(self, role: str) -> None:
        """Give ``role`` up at once, so another member can take it."""

    @abstractmethod
    def members(self) -> frozenset[str]:
        """The live members."""

    @abstractmethod
    def stop(self) -> None:
        """Leave the membership and give every role up."""


LiveMembers = Callable[[Session], frozenset[str]]
"""Who is alive, read in the election's own transaction."""


class SqlElector(Elector):
    """Leases in the service's database.

    ``live`` names the members known to be alive (the conductors, from their
    heartbeats): a role held by anyone else is free at once. Without it only
    the lease tells, so a dead holder's role is free when its lease runs out.
    """

    def __init__(
        self, db: Database, member_id: str, lease_seconds: float, live: LiveMembers | None = None
    ) -> None:
        self.db = db
        self.member_id = member_id
        self.lease = dt.timedelta(seconds=lease_seconds)
        self._live_members = live

    @classmethod
    def for_conductors(cls, ctx: ConductorContext, lease_seconds: float) -> SqlElector:
        """The conductors' election: members are the conductors alive by their heartbeats."""

        def live(session: Session) -> frozenset[str]:
            rows = session.connection().scalars(LIVE_CONDUCTORS, {"b_cutoff": live_cutoff(ctx)})
            return frozenset(rows)

        return cls(ctx.db, ctx.hostname, lease_seconds, live)

    def start(self) -> None:
        """Nothing to join: the membership is in the database."""

    def _live(self, session: Session) -> frozenset[str] | None:
        return None if self._live_members is None else self._live_members(session)

    def campaign(self, role: str) -> bool:
        with self.db.write() as session:
            now = now_for(session)
            row = session.scalar(
                select(LeaderLease).where(LeaderLease.role == role).with_for_update()
            )
            if row is None:
                session.add(
                    LeaderLease(
                        role=role, holder=self.member_id, epoch=1, expires_at=now + self.lease
                    )
                )
                return True
            if row.holder == self.member_id and row.expires_at > now:
                row.expires_at = now + self.lease
                return True
            free = row.holder is None or row.expires_at <= now
            live = None if free else self._live(session)
            if live is not None and row.holder not in live:
                free = True  # its holder is dead: no need to wait for the lease
            if not free:
                return False
            row.holder = self.member_id
            row.epoch += 1
            row.expires_at = now + self.lease
            return True

    def _release(self, *where: ColumnElement[bool]) -> None:
        with self.db.write() as session:
            session.execute(
                update(LeaderLease)
                .where(LeaderLease.holder == self.member_id, *where)
                .values(holder=None, expires_at=now_for(session))
            )

    def stand_down(self, role: str) -> None:
        self._release(LeaderLease.role == role)

    def members(self) -> frozenset[str]:
        with self.db.read() as session:
            live = self._live(session)
        return frozenset({self.member_id}) if live is None else live

    def stop(self) -> None:
        self._release()


class ToozElector(Elector):
    """A tooz group for membership, one tooz lock per role for leadership."""

    def __init__(self, url: str, member_id: str, group: str, timeout: float) -> None:
        from tooz import coordination  # imported only when configured

        self.member_id = member_id
        self.group = group.encode()
        self.timeout = timeout
        try:
            self._coordinator = coordination.get_coordinator(url, member_id.encode())
        except ImportError as exc:
            raise LeadershipUnavailable(
                f"the coordination backend's client library is not installed: {exc}"
            ) from exc
        self._locks: dict[str, Any] = {}
        self._held: set[str] = set()

    def start(self) -> None:
        import tooz

        try:
            self._coordinator.start(start_heart=True)
            self._coordinator.join_group_create(self.group)
            self._coordinator.get_members(self.group).get(timeout=self.timeout)
            probe = self._coordinator.get_lock(b"metalforge-leadership-probe")
            if probe.acquire(blocking=False):
                probe.release()
        except tooz.NotImplemented as exc:
            self._quietly_stop()
            raise LeadershipUnavailable(
                f"the coordination backend cannot elect leaders (needs groups and locks): {exc}"
            ) from exc

    def _lock(self, role: str) -> Any:
        if role not in self._locks:
            self._locks[role] = self._coordinator.get_lock(f"metalforge-leader-{role}".encode())
        return self._locks[role]

    def campaign(self, role: str) -> bool:
        lock = self._lock(role)
        if role in self._held:
            try:
                still = bool(lock.heartbeat())
            except Exception:
                still = False
            if still:
                return True
            LOG.warning("lost the %s leadership lock", role)
            self._held.discard(role)
        if lock.acquire(blocking=False):
            self._held.add(role)
            return True
        return False

    def stand_down(self, role: str) -> None:
        if role in self._held:
            self._held.discard(role)
            try:
                self._lock(role).release()
            except Exception:
                LOG.warning("could not release the %s leadership lock", role, exc_info=True)

    def members(self) -> frozenset[str]:
        found = self._coordinator.get_members(self.group).get(timeout=self.timeout)
        return frozenset(m.decode() if isinstance(m, bytes) else str(m) for m in found)

    def stop(self) -> None:
        for role in list(self._held):
            self.stand_down(role)
        self._quietly_stop()

    def _quietly_stop(self) -> None:
        try:
            self._coordinator.stop()
        except Exception:
            LOG.warning("leaving the coordination backend failed", exc_info=True)


def build_elector(ctx: ConductorContext, settings: CoordinationSettings) -> Elector:
    """The configured backend: the database unless ``backend_url`` names a tooz one."""
    if not settings.backend_url:
        return SqlElector.for_conductors(ctx, settings.leader_lease)
    return ToozElector(
        settings.backend_url,
        f"metalforge.conductor.{ctx.hostname}",
        settings.group,
        settings.leader_lease,
    )


@dataclass(frozen=True)
class SingletonTask:
    """A periodic task that must run on one process at a time."""

    role: str
    period: Callable[[ConductorContext], float]
    """Seconds between runs, read from the settings."""
    run: Callable[[ConductorContext], object]


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
        self._leading: set[str] = set()
        self._last_run: dict[str, float] = {}
        self._members: frozenset[str] | None = None
        self._failures = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def leads(self, role: str) -> bool:
        with self._lock:
            return role in self._leading

    def start(self) -> None:
        self.elector.start()
        self._thread = threading.Thread(target=self._loop, name="conductor-leadership", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._lock:
            self._leading.clear()
        try:
            self.elector.stop()
        except Exception:
            LOG.warning("standing down at shutdown failed", exc_info=True)

    def _loop(self) -> None:
        while not self.ctx.stopping.is_set():
            self.round()
            self.ctx.stopping.wait(self.settings.election_interval)

    def round(self) -> None:
        """One election round: notice a shrinking membership, campaign, run what is due."""
        try:
            self._elect()
            self._failures = 0
        except Exception as exc:
            self._failures += 1
            with self._lock:
                self._leading.clear()
            LOG.warning(
                "coordination round failed (%d of %d): %s",
                self._failures,
                self.settings.retry_count,
                exc,
            )
            if self._failures >= self.settings.retry_count:
                self.on_fatal(f"the coordination backend failed {self._failures} times in a row")
            return
        for task in self.tasks:
            if self.leads(task.role) and self._due(task):
                self._run(task)

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
            won = self.elector.campaign(task.role)
            with self._lock:
                was = task.role in self._leading
                if won:
                    self._leading.add(task.role)
                else:
                    self._leading.discard(task.role)
            if won != was:
                LOG.info(
                    "%s %s the %s role",
                    self.elector.member_id,
                    "leads" if won else "lost",
                    task.role,
                )

    def _stand_down_all(self) -> None:
        with self._lock:
            roles = list(self._leading)
            self._leading.clear()
        for role in roles:
            self.elector.stand_down(role)
        self._last_run.clear()

    def _due(self, task: SingletonTask) -> bool:
        last = self._last_run.get(task.role)
        return last is None or time.monotonic() - last >= task.period(self.ctx)

    def _run(self, task: SingletonTask) -> None:
        self._last_run[task.role] = time.monotonic()
        LOG.info("singleton %s starts on %s", task.role, self.elector.member_id)
        try:
            task.run(self.ctx)
        except Exception:
            LOG.exception(
                "singleton %s failed on %s; standing down", task.role, self.elector.member_id
            )
            with self._lock:
                self._leading.discard(task.role)
            try:
                self.elector.stand_down(task.role)
            except Exception:
                LOG.warning("standing down from %s failed", task.role, exc_info=True)
        finally:
            LOG.info("singleton %s ends on %s", task.role, self.elector.member_id)
