"""The conductor process: start and stop the threads that do a conductor's jobs.

Each job is a module of its own: ``registration`` (the conductor's row and
heartbeat), ``dispatch`` (claiming work for the workers), ``running`` (one
item under its node's reservation, and giving up on one), ``takeover``
(resuming the flows of dead conductors' nodes), ``power_sync`` and the
singleton tasks ``leadership`` runs. This class only wires them into
threads. A graceful stop lets running items finish their current step, then
marks the conductor offline so others take over at once.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from metalforge.conductor import (
    housekeeping,
    inspection_sweeps,
    power_sync,
    registration,
    running,
    takeover,
)
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.dispatch import Dispatcher
from metalforge.conductor.flows import catalog
from metalforge.conductor.flows.spec import DetachedFlow
from metalforge.conductor.leadership import Leadership, SingletonTask
from metalforge.coordination.election import build_elector
from metalforge.db import queue
from metalforge.db.bmc_breakers import BreakerRecorder
from metalforge.drivers import failures
from metalforge.drivers.bmc_guard import GUARD

LOG = logging.getLogger(__name__)


class ConductorProcess:
    """One conductor: call ``start`` then ``stop``."""

    def __init__(self, ctx: ConductorContext, tasks: Sequence[SingletonTask] = ()) -> None:
        """``tasks``: singleton tasks beyond the conductor's own, from the layers above it
        (advancing rollouts)."""
        self.ctx = ctx
        self._threads: list[threading.Thread] = []
        self.dispatcher = Dispatcher(ctx)
        self.run_id = uuid.uuid4().hex
        """This process's claim on the hostname (see ``registration``)."""
        self.on_fatal: Callable[[], None] = lambda: None
        """What the process does when it must stop working at once (another process took
        its hostname, the coordination backend is out of reach): the CLI ends it."""
        self.leadership = Leadership(
            ctx,
            build_elector(ctx.db, ctx.hostname, ctx.dead_after, ctx.settings.coordination),
            (*inspection_sweeps.TASKS, *housekeeping.TASKS, *tasks),
            ctx.settings.coordination,
            on_fatal=self._lost_coordination,
        )

    # -- lifecycle -------------------------------------------------------
    def start(self) -> None:
        self.register()
        # The BMC and agent failures this process's drivers count go out with the rest.
        self.ctx.db.also_flush(failures.FAILURES)
        GUARD.configure(
            self.ctx.settings.bmc_guard, BreakerRecorder(self.ctx.db, self.ctx.hostname)
        )
        self.leadership.start()
        loops: list[tuple[str, Callable[[], None]]] = [
            ("dispatcher", self.dispatcher.loop),
            ("heartbeat", self._heartbeat_loop),
            ("periodic", self._periodic_loop),
            ("power-sync", self._power_sync_loop),
        ]
        for flow in catalog.DETACHED.values():
            loops.append((f"{flow.name}-takeover", functools.partial(self._adoption_loop, flow)))
        for name, target in loops:
            thread = threading.Thread(target=target, name=f"conductor-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        LOG.info(
            "conductor %s started with %d workers", self.ctx.hostname, self.ctx.settings.workers
        )

    def stop(self, timeout: float | None = None) -> bool:
        """Stop claiming, let running items reach a safe point, go offline; whether
        every item did (false: some are still inside a driver call).

        Within ``timeout`` seconds (``conductor.shutdown_timeout``): every wait
        a running item is in (a step's sleep, the power-on throttle) ends at
        once and gives the item back; an item still inside a driver call by
        then is left to its lease, and the conductor goes offline anyway, so
        others take its nodes over at once.
        """
        limit = self.ctx.settings.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        self.ctx.stopping.set()
        self.ctx.waker.notify()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        self.dispatcher.shutdown()
        finished = self.dispatcher.wait_idle(max(0.0, deadline - time.monotonic()))
        self.leadership.stop(max(0.0, deadline - time.monotonic()))
        registration.go_offline(self.ctx, self.run_id)
        LOG.info("conductor %s stopped", self.ctx.hostname)
        return finished

    def _lost_hostname(self) -> None:
        """Another process registered this hostname: stop working at once.

        Both would otherwise drop each other's reservations and claims; the
        newer registration wins and this process stops claiming, then asks
        its owner to end it (``on_fatal``).
        """
        LOG.critical(
            "another conductor registered with hostname %s; this one stops", self.ctx.hostname
        )
        self.ctx.stopping.set()
        self.ctx.waker.notify()
        self.on_fatal()

    def _lost_coordination(self, reason: str) -> None:
        """Leader election keeps failing: stop rather than act on a stale picture."""
        LOG.critical("conductor %s stops: %s", self.ctx.hostname, reason)
        self.ctx.stopping.set()
        self.ctx.waker.notify()
        self.on_fatal()

    # -- the jobs, one call each (tests and the loops below use them) ------
    def register(self) -> None:
        registration.register(self.ctx, self.run_id)

    def heartbeat(self) -> None:
        if not registration.heartbeat(
            self.ctx, self.run_id, self.dispatcher.running(), self.dispatcher.lease
        ):
            self._lost_hostname()

    def dispatch_once(self) -> int:
        return self.dispatcher.dispatch_once()

    def run_item(self, item: queue.ClaimedItem, locked: dict[str, Any] | None = None) -> None:
        running.run_item(self.ctx, item, locked)

    def take_over(self) -> int:
        return takeover.take_over(self.ctx)

    # -- loops -----------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        """Heartbeat; while the database is out of reach, try again ``database.retry_interval``
        apart, and stop the conductor after ``database.retry_count`` failures in a row."""
        failed = 0
        retry = self.ctx.db.retry
        wait = self.ctx.settings.heartbeat_interval
        while not self.ctx.stopping.wait(wait):
            try:
                self.heartbeat()
                failed = 0
                wait = self.ctx.settings.heartbeat_interval
            except Exception as exc:  # noqa: BLE001 - any failure counts toward stopping
                failed += 1
                wait = retry.interval
                LOG.warning("heartbeat failed (%d of %d in a row): %s", failed, retry.count, exc)
                if failed >= retry.count:
                    # Going on would act on a picture of the cluster it cannot check.
                    self._lost_coordination(f"the database failed {failed} heartbeats in a row")
                    return

    def _periodic_loop(self) -> None:
        interval = self.ctx.settings.takeover_interval
        if interval <= 0:
            return
        while not self.ctx.stopping.wait(interval):
            try:
                self.take_over()
                with self.ctx.db.write() as session:
                    queue.purge_finished(session, dt.timedelta(hours=1))
            except Exception:  # the periodic loop outlives any failure
                LOG.exception("periodic task failed")

    def _adoption_loop(self, flow: DetachedFlow) -> None:
        """Adopt what dead conductors left unfinished of ``flow``, every interval."""
        interval = flow.adopt_interval(self.ctx.settings)
        if interval <= 0:
            return
        while not self.ctx.stopping.wait(interval):
            try:
                flow.adopt(self.ctx)
            except Exception:  # the adoption loop outlives a flow's bug
                LOG.exception("%s takeover failed", flow.name)

    def _power_sync_loop(self) -> None:
        """Compare recorded and real power states of idle nodes, every interval.

        A thread of its own: one sync may wait out several unreachable BMCs,
        which must not delay takeovers.
        """
        interval = self.ctx.settings.sync_power_interval
        if interval <= 0:
            return
        while not self.ctx.stopping.wait(interval):
            try:
                report = power_sync.sync_power_states(
                    self.ctx,
                    force=self.ctx.settings.force_power_state_during_sync,
                    workers=self.ctx.settings.sync_power_workers,
                )
                if report.drifted or report.failed:
                    LOG.info("power state sync: %s", report)
            except Exception:  # the sync loop outlives a driver's bug
                LOG.exception("power state sync failed")
