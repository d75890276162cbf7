"""Electing one member per role: the backends, and the epochs that fence each term.

Every member campaigns for a role; the backend grants it to one member, for
a lease it must keep renewing. Two backends:

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

Both backends keep the ``leader_leases`` row of each role, and its epoch is
the fencing token (``check_lease``): a write made under a term checks, in
its own transaction, that the row still names the member, the epoch and an
unexpired lease (``LeaseLost`` otherwise). Each backend says how long its
rounds may fail (``Elector.retry``): the database's ``retry_*`` settings for
the database backend, ``coordination.retry_*`` for tooz.

Nothing here needs a conductor: the backends take a database, a member name,
the dead-after timeout and the coordination settings, so the PXE filter
elects its leader with the same code the conductors use for their singleton
tasks (``metalforge.conductor.leadership``).
"""

from __future__ import annotations

import datetime as dt
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from metalforge.config import CoordinationSettings
from metalforge.coordination.membership import LIVE_CONDUCTORS, live_cutoff
from metalforge.db.engine import Database, RetryPolicy, now_for
from metalforge.db.models import LeaderLease

LOG = logging.getLogger(__name__)


class LeadershipUnavailable(RuntimeError):
    """The coordination backend cannot elect leaders; the conductor must not start."""


class LeaseLost(RuntimeError):
    """The role passed to another term since this one was won: the write is refused."""


def check_lease(session: Session, role: str, member: str, epoch: int) -> None:
    """Refuse the transaction unless ``member`` still holds ``role`` at ``epoch``.

    The row is locked for the rest of the transaction (PostgreSQL; SQLite's
    writer lock does the same), so no election can change hands before the
    caller's writes commit.
    """
    row = session.scalar(select(LeaderLease).where(LeaderLease.role == role).with_for_update())
    if row is None or row.holder != member or row.epoch != epoch:
        holder = "nobody" if row is None or row.holder is None else row.holder
        raise LeaseLost(f"the {role} role is held by {holder} now, not by {member}")
    if row.expires_at <= now_for(session):
        raise LeaseLost(f"{member}'s lease on the {role} role ran out")


class EpochLedger:
    """The ``leader_leases`` rows a backend that elects elsewhere (tooz) keeps as fences."""

    def __init__(self, db: Database, lease_seconds: float) -> None:
        self.db = db
        self.lease = dt.timedelta(seconds=lease_seconds)

    def take(self, role: str, member: str) -> int:
        """``member`` was just elected: a new epoch, which ends every earlier term."""
        with self.db.write() as session:
            now = now_for(session)
            row = session.scalar(
                select(LeaderLease).where(LeaderLease.role == role).with_for_update()
            )
            if row is None:
                row = LeaderLease(role=role, holder=member, epoch=1, expires_at=now + self.lease)
                session.add(row)
                return 1
            row.holder = member
            row.epoch += 1
            row.expires_at = now + self.lease
            return row.epoch

    def renew(self, role: str, member: str, epoch: int) -> bool:
        """Extend the term; False when another member's election ended it."""
        with self.db.write() as session:
            now = now_for(session)
            renewed = session.execute(
                update(LeaderLease)
                .where(
                    LeaderLease.role == role,
                    LeaderLease.holder == member,
                    LeaderLease.epoch == epoch,
                )
                .values(expires_at=now + self.lease)
            )
            return bool(getattr(renewed, "rowcount", 0))

    def release(self, member: str, role: str | None = None) -> None:
        """End ``member``'s terms (of ``role``, or of every role)."""
        with self.db.write() as session:
            where = [LeaderLease.holder == member]
            if role is not None:
                where.append(LeaderLease.role == role)
            session.execute(
                update(LeaderLease).where(*where).values(holder=None, expires_at=now_for(session))
            )


class Elector(ABC):
    """One backend's election: which member leads each role."""

    member_id: str
    retry: RetryPolicy
    """How long rounds may fail in a row, and how far apart, before the member gives up."""

    @abstractmethod
    def start(self) -> None:
        """Connect and join the membership (``LeadershipUnavailable`` if it cannot elect)."""

    @abstractmethod
    def campaign(self, role: str) -> int | None:
        """Take or keep ``role``: the epoch of this member's term, or None if it does not lead."""

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
        self.retry = db.retry  # the backend is the database
        self.lease = dt.timedelta(seconds=lease_seconds)
        self._live_members = live

    @classmethod
    def for_conductors(
        cls, db: Database, hostname: str, dead_after: dt.timedelta, lease_seconds: float
    ) -> SqlElector:
        """The conductors' election: members are the conductors alive by their heartbeats.

        ``hostname`` is this conductor's, and ``dead_after`` the heartbeat age
        past which another is dead (``conductor.heartbeat_timeout``), so a
        dead leader's role is taken at once rather than when its lease ends.
        """

        def live(session: Session) -> frozenset[str]:
            cutoff = live_cutoff(db, dead_after)
            rows = session.connection().scalars(LIVE_CONDUCTORS, {"b_cutoff": cutoff})
            return frozenset(rows)

        return cls(db, hostname, lease_seconds, live)

    def start(self) -> None:
        """Nothing to join: the membership is in the database."""

    def _live(self, session: Session) -> frozenset[str] | None:
        return None if self._live_members is None else self._live_members(session)

    def campaign(self, role: str) -> int | None:
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
                return 1
            if row.holder == self.member_id and row.expires_at > now:
                row.expires_at = now + self.lease
                return row.epoch
            free = row.holder is None or row.expires_at <= now
            live = None if free else self._live(session)
            if live is not None and row.holder not in live:
                free = True  # its holder is dead: no need to wait for the lease
            if not free:
                return None
            row.holder = self.member_id
            row.epoch += 1
            row.expires_at = now + self.lease
            return row.epoch

    def stand_down(self, role: str) -> None:
        EpochLedger(self.db, 0).release(self.member_id, role)

    def members(self) -> frozenset[str]:
        with self.db.read() as session:
            live = self._live(session)
        return frozenset({self.member_id}) if live is None else live

    def stop(self) -> None:
        EpochLedger(self.db, 0).release(self.member_id)


class ToozElector(Elector):
    """A tooz group for membership, one tooz lock per role for leadership.

    The locks elect; the ``ledger`` records each term's epoch in the database
    so the tasks' writes are fenced as they are with ``SqlElector``.
    """

    def __init__(
        self,
        url: str,
        member_id: str,
        group: str,
        timeout: float,
        ledger: EpochLedger,
        retry: RetryPolicy | None = None,
    ) -> None:
        from tooz import coordination  # imported only when configured

        self.member_id = member_id
        self.retry = retry or RetryPolicy()
        self.group = group.encode()
        self.timeout = timeout
        self.ledger = ledger
        try:
            self._coordinator = coordination.get_coordinator(url, member_id.encode())
        except ImportError as exc:
            raise LeadershipUnavailable(
                f"the coordination backend's client library is not installed: {exc}"
            ) from exc
        self._locks: dict[str, Any] = {}
        self._held: dict[str, int] = {}
        """Role → the epoch of the term its lock won."""

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

    def campaign(self, role: str) -> int | None:
        lock = self._lock(role)
        epoch = self._held.get(role)
        if epoch is not None:
            try:
                still = bool(lock.heartbeat())
            except Exception:  # noqa: BLE001 - tooz drivers raise anything: the lock is unproven
                still = False
            if still and self.ledger.renew(role, self.member_id, epoch):
                return epoch
            LOG.warning("lost the %s leadership lock", role)
            self.stand_down(role)
        if lock.acquire(blocking=False):
            try:
                epoch = self.ledger.take(role, self.member_id)
            except Exception:  # re-raised: the lock is released whatever failed
                lock.release()
                raise
            self._held[role] = epoch
            return epoch
        return None

    def stand_down(self, role: str) -> None:
        if self._held.pop(role, None) is not None:
            try:
                self.ledger.release(self.member_id, role)
            finally:
                try:
                    self._lock(role).release()
                except Exception:  # tooz drivers raise anything; the lock expires
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
        except Exception:  # shutdown goes on whatever the backend raises
            LOG.warning("leaving the coordination backend failed", exc_info=True)


def build_elector(
    db: Database, hostname: str, dead_after: dt.timedelta, settings: CoordinationSettings
) -> Elector:
    """The configured backend for conductor ``hostname``: the database unless
    ``backend_url`` names a tooz one.

    ``dead_after`` is only read by the database backend, whose members are
    the conductors alive by their heartbeats; tooz keeps its own membership.
    """
    if not settings.backend_url:
        return SqlElector.for_conductors(db, hostname, dead_after, settings.leader_lease)
    return ToozElector(
        settings.backend_url,
        f"metalforge.conductor.{hostname}",
        settings.group,
        settings.leader_lease,
        EpochLedger(db, settings.leader_lease),
        RetryPolicy(settings.retry_count, settings.retry_interval),
    )
