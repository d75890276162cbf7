"""One filter host's loop: elect, read the desired state, apply, repair, and block on error.

Every host campaigns for one role each ``election_interval``; the holder
(the leader) applies the cluster's filter, every other host blocks (its
known MACs denied, nobody allowed), so at most one host's DHCP service
answers the nodes being inspected. A commit that may change the filter
wakes the loop (``db.changes``), which reads the desired state and applies
it if it changed; every ``sync_period`` the driver also checks what is
really in place and repairs it. Any error (the database, the driver, the
election) sets the host blocking, gives the role up, is logged and shown
in the status table, and the next round tries again: filtering never
stops for good. Stopping leaves the host blocking.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select

from metalforge.config import PxeFilterSettings
from metalforge.coordination.election import Elector
from metalforge.db.engine import Database, now_for
from metalforge.db.models import PxeFilterHost
from metalforge.pxe_filter.desired import FilterState, desired_state, for_host
from metalforge.pxe_filter.driver import FilterDriver

LOG = logging.getLogger(__name__)

ROLE = "pxe-filter"
"""The singleton role whose holder's host answers the nodes being inspected."""

STATUS_EVERY = 10.0
"""Seconds between status writes of a host whose status did not change: a row older
than a few of these belongs to a host that is gone."""

PASSING = "passing"
BLOCKING = "blocking"
STOPPED = "stopped"


class LeaseOverdue(RuntimeError):
    """This host's leadership may have passed to another host: it must block."""


@dataclass(frozen=True)
class HostStatus:
    """What the status table shows for this host (written when it changes)."""

    mode: str
    allowed: int
    denied: int
    unknown_allowed: bool
    error: str | None


class PxeFilter:
    """The filter of this host; ``start`` runs the loop in a thread, ``step`` is one round."""

    def __init__(
        self,
        db: Database,
        settings: PxeFilterSettings,
        driver: FilterDriver,
        elector: Elector,
        *,
        discovery: bool,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        self.settings = settings
        self.driver = driver
        self.elector = elector
        self.discovery = discovery
        self.monotonic = monotonic
        self.woken = threading.Event()
        """Set by a change notification: the next round reads the desired state."""
        self.stopping = threading.Event()
        self.leading = False
        self.applied: FilterState | None = None
        """What the driver was last told (None: nothing yet, or lost to an error)."""
        self.error: str | None = None
        self._driver_lock = threading.Lock()
        """One driver call at a time; once ``_stopped`` is set under it, nothing but
        blocking reaches the driver again."""
        self._stopped = False
        self._prepared = False
        self._healthy = False
        """A sync succeeded since start or the last failure: only then may this host
        campaign (a broken host must not keep winning the role and answer nobody)."""
        self._won_at = 0.0
        """When (monotonic) the campaign that last kept the role began."""
        self._overdue = False
        self._next_election = 0.0
        self._next_repair = 0.0
        self._status: HostStatus | None = None
        self._recorded_at = 0.0
        self._synced_at: dt.datetime | None = None
        self._threads: list[threading.Thread] = []

    def wake(self) -> None:
        """A commit may have changed the filter (the change feed's callback)."""
        self.woken.set()

    def start(self) -> None:
        for target, name in ((self._loop, "pxe-filter"), (self._watch, "pxe-filter-watchdog")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        """Leave the host blocking and give the role up (SIGTERM ends here)."""
        self.stopping.set()
        self.woken.set()
        with self._driver_lock:
            self._stopped = True  # a round still running applies nothing after this
            try:
                self.driver.block()
            except Exception:  # the exit goes on whatever the driver raises
                LOG.exception("could not block the PXE filter at exit")
            else:
                self.driver.close()
        for thread in self._threads:
            thread.join(timeout)
        self.leading = False
        try:
            self.elector.stand_down(ROLE)
        except Exception:  # the exit goes on; the role's lease runs out
            LOG.warning("could not give the PXE filter role up at exit", exc_info=True)
        self._record(HostStatus(STOPPED, 0, 0, False, self.error))

    def _loop(self) -> None:
        while not self.stopping.is_set():
            self.step()
            self.woken.wait(self._seconds_to_next_round())

    def _watch(self) -> None:
        while not self.stopping.wait(self.settings.election_interval / 2):
            self.check_lease()

    def check_lease(self) -> None:
        """The watchdog: a leader whose rounds stopped (a hung database call) must not
        keep answering once another host may have taken the role: block now."""
        if not self.leading or self._lease_left() > 0 or self._overdue:
            return
        self._overdue = True
        LOG.error("PXE filter on %s missed its lease renewal; blocking", self.settings.hostname)
        try:
            self._block()
        except Exception:  # the watchdog thread outlives any failure
            LOG.exception("could not block the PXE filter")

    def _seconds_to_next_round(self) -> float:
        now = self.monotonic()
        due = self._next_election
        if self.settings.sync_period > 0:
            due = min(due, self._next_repair)
        return max(0.0, due - now)

    def _lease_left(self) -> float:
        """Seconds this host may still act as the leader: the lease it renewed at its
        last campaign, less one round, so it stops before anyone else may start."""
        lease = self.settings.leader_lease - self.settings.election_interval
        return self._won_at + lease - self.monotonic()

    def step(self) -> None:
        """One round: campaign when due, then apply what changed; block on any error."""
        now = self.monotonic()
        if self.error is not None and not self._overdue and now < self._next_election:
            return  # after a failure the next try waits its round, wake-ups or not
        try:
            if self._overdue:
                raise LeaseOverdue("a round came too late to renew the leader's lease")
            if not self._prepared:
                with self._driver_lock:
                    self.driver.start()
                self._prepared = True
                self.applied = None
            refresh = False
            if now >= self._next_election:
                self._next_election = now + self.settings.election_interval
                if self._healthy:
                    self._campaign(now)
                    refresh = self.leading  # the leader's entries expire unless renewed
            woken = self.woken.is_set()
            self.woken.clear()
            repair = self.applied is None or (
                self.settings.sync_period > 0 and now >= self._next_repair
            )
            if woken or repair:
                with self.db.read() as session:
                    desired = desired_state(session, discovery=self.discovery)
                wanted = for_host(desired, leading=self.leading)
                if repair or wanted != self.applied:
                    self._apply(wanted, repair=repair)
                    refresh = False
                self.applied = wanted
                self._synced_at = self.db.now()
            if refresh and self.applied is not None:
                self._apply(self.applied, repair=False)
            if repair:
                self._next_repair = now + self.settings.sync_period
            self.error = None
            if not self._healthy:
                self._healthy = True
                self._next_election = now  # filtering works: campaign at once
            self._record_applied(force=repair or now - self._recorded_at >= STATUS_EVERY)
        except Exception as exc:  # noqa: BLE001 - any failure blocks the host
            self._fail(exc)

    def _apply(self, state: FilterState, *, repair: bool) -> None:
        """Apply under the driver lock; the leader's entries live as long as its lease."""
        with self._driver_lock:
            if self._stopped:
                return
            valid_for = self._lease_left() if self.leading else 0.0
            if not state.blocking and valid_for <= 0:
                raise LeaseOverdue("the leader's lease ran out before its filter was applied")
            self.driver.apply(state, repair=repair, valid_for=valid_for)

    def _block(self) -> None:
        with self._driver_lock:
            self.driver.block()

    def _campaign(self, now: float) -> None:
        leading = self.elector.campaign(ROLE) is not None
        if leading:
            self._won_at = now  # the lease runs from before the campaign, at the latest
        if leading != self.leading:
            LOG.info(
                "PXE filter on %s is now %s",
                self.settings.hostname,
                "the leader: answering the nodes being inspected"
                if leading
                else "not the leader: blocking",
            )
            self.leading = leading
            self.woken.set()  # what this host applies changes with its role

    def _fail(self, exc: Exception) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        LOG.error("PXE filter failed on %s; blocking: %s", self.settings.hostname, self.error)
        self.applied = None
        self._healthy = False
        try:
            self._block()
        except Exception:  # whatever the driver raises, the next round retries
            LOG.exception("could not block the PXE filter either; retrying next round")
            self._prepared = False  # start over, purging what is there
        if self.leading:
            self.leading = False
            try:
                self.elector.stand_down(ROLE)
            except Exception:  # whatever the backend raises, the lease runs out
                LOG.warning("could not give the PXE filter role up", exc_info=True)
        self._overdue = False
        # The next try is a round away (no spinning on a failure that lasts).
        self._next_election = self._next_repair = self.monotonic() + self.settings.election_interval
        self._record(HostStatus(BLOCKING, 0, 0, False, self.error))

    def _record_applied(self, *, force: bool) -> None:
        state = self.applied
        if state is None:
            return
        mode = PASSING if self.leading and not state.blocking else BLOCKING
        status = HostStatus(
            mode, len(state.allowed), len(state.denied), state.unknown_allowed, None
        )
        if force or status != self._status:
            self._record(status)

    def _record(self, status: HostStatus) -> None:
        """Best effort: the status must never be why the filter stops."""
        try:
            with self.db.write() as session:
                row = session.get(PxeFilterHost, self.settings.hostname)
                if row is None:
                    row = PxeFilterHost(hostname=self.settings.hostname)
                    session.add(row)
                row.driver = self.driver.name
                row.mode = status.mode
                row.allowed = status.allowed
                row.denied = status.denied
                row.unknown_allowed = status.unknown_allowed
                row.error = status.error
                row.synced_at = self._synced_at
                row.updated_at = now_for(session)
            self._status = status
            self._recorded_at = self.monotonic()
        except Exception:  # the status must never be why the filter stops
            LOG.warning("could not record the PXE filter's status", exc_info=True)


def host_statuses(db: Database) -> list[PxeFilterHost]:
    """Every filter host's last recorded status, by host name."""
    with db.read() as session:
        return list(session.scalars(select(PxeFilterHost).order_by(PxeFilterHost.hostname)))
