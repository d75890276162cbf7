"""The conductor process: registration, heartbeat, workers and periodic tasks.

Workers claim work items and run them under the node's reservation. Every
conductor also runs the (idempotent, fenced) periodic tasks: it takes over
nodes left busy by dead conductors by queueing their flow again, purges
old finished work items, and syncs the power state of idle nodes. A graceful
stop lets running items finish their current step, then marks the conductor
offline so others take over at once.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import String, cast, exists, literal, select, update
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.conductor import history, housekeeping, inspection_sweeps, node_work, power_sync
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.flows import catalog
from metalforge.conductor.flows.spec import DetachedFlow
from metalforge.conductor.leadership import Leadership, build_elector
from metalforge.conductor.task import (
    LIVE_CONDUCTORS,
    Interrupted,
    LockLost,
    NodeGone,
    NodeTask,
    acquire,
    dead_conductors,
    drop_leaked_reservations,
    live_cutoff,
    lock,
    note_unheld_failure,
    unlock,
)
from metalforge.conductor.work import NodeWork, PayloadError
from metalforge.db import queue
from metalforge.db.models import Conductor, Node, WorkItem, utcnow
from metalforge.drivers import failures
from metalforge.errors import NodeLocked
from metalforge.redaction import scrub_message

LOG = logging.getLogger(__name__)


class HostnameInUse(RuntimeError):
    """Another running conductor has this conductor's hostname."""


LOCKED_RETRY_DELAY = 0.2
"""Seconds before retrying an item whose node another conductor holds."""


class ConductorService:
    """One conductor: call ``start`` then ``stop``."""

    def __init__(self, ctx: ConductorContext) -> None:
        self.ctx = ctx
        self._threads: list[threading.Thread] = []
        self._pool = ThreadPoolExecutor(ctx.settings.workers, thread_name_prefix="conductor")
        self._slots = threading.Semaphore(ctx.settings.workers)
        self._lease = dt.timedelta(seconds=ctx.settings.lease_seconds)
        self._running: set[int] = set()
        """Items this conductor's workers are running: the only leases the heartbeat renews."""
        self._running_lock = threading.Lock()
        self.run_id = uuid.uuid4().hex
        """This process's claim on the hostname (see ``register``)."""
        self.on_fatal: Callable[[], None] = lambda: None
        """What the process does when it must stop working at once (another process took
        its hostname, the coordination backend is out of reach): the CLI ends it."""
        self.leadership = Leadership(
            ctx,
            build_elector(ctx, ctx.settings.coordination),
            (*inspection_sweeps.TASKS, *housekeeping.TASKS),
            ctx.settings.coordination,
            on_fatal=self._lost_coordination,
        )

    # -- lifecycle -------------------------------------------------------
    def start(self) -> None:
        self.register()
        # The BMC and agent failures this process's drivers count go out with the rest.
        self.ctx.db.also_flush(failures.FAILURES)
        self.leadership.start()
        loops: list[tuple[str, Callable[[], None]]] = [
            ("dispatcher", self._dispatch_loop),
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
        # Not cancelled: an item the dispatcher handed over just before it stopped
        # may still wait for a worker, and it holds its node; it gives both back.
        self._pool.shutdown(wait=False)
        while self._running and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._running:
            LOG.warning(
                "conductor %s stops with %d item(s) still running; they go to other conductors",
                self.ctx.hostname,
                len(self._running),
            )
        # Within what is left of the bound: the election thread may be in a round.
        self.leadership.stop(max(0.0, deadline - time.monotonic()))
        with self.ctx.db.write() as session:
            session.execute(
                update(Conductor)
                .where(Conductor.hostname == self.ctx.hostname, Conductor.run_id == self.run_id)
                .values(online=False, updated_at=utcnow())
            )
        LOG.info("conductor %s stopped", self.ctx.hostname)
        return not self._running

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

    def _name_in_use(self) -> bool:
        """Whether another running process heartbeats under this conductor's hostname.

        A fresh heartbeat alone does not tell: a previous run that crashed a
        moment ago left one. A running process writes the next one within
        ``heartbeat_interval``, so watch for one a little longer than that.
        """

        def beat() -> tuple[str | None, dt.datetime | None]:
            with self.ctx.db.read() as session:
                row = session.execute(
                    select(Conductor.run_id, Conductor.heartbeat_at).where(
                        Conductor.hostname == self.ctx.hostname, Conductor.online.is_(True)
                    )
                ).first()
            return (row.run_id, row.heartbeat_at) if row is not None else (None, None)

        first = beat()
        if first[1] is None or self.ctx.db.now() - first[1] > self.ctx.dead_after:
            return False
        deadline = time.monotonic() + 2 * self.ctx.settings.heartbeat_interval + 1.0
        while time.monotonic() < deadline:
            time.sleep(min(0.2, self.ctx.settings.heartbeat_interval / 4))
            if beat() != first:
                return True
        return False

    def register(self) -> None:
        """Upsert this conductor's row and drop reservations a previous run of it left.

        Refuses (``HostnameInUse``) while another process runs under the same
        hostname: they would drop each other's reservations and claims.
        """
        if self._name_in_use():
            raise HostnameInUse(
                f"another conductor is running with hostname {self.ctx.hostname!r}; give "
                "each conductor its own conductor.hostname"
            )
        drivers = sorted(self.ctx.drivers.types)
        with self.ctx.db.write() as session:
            row = session.scalar(select(Conductor).where(Conductor.hostname == self.ctx.hostname))
            if row is None:
                session.add(
                    Conductor(
                        hostname=self.ctx.hostname,
                        drivers=drivers,
                        conductor_group=self.ctx.settings.conductor_group,
                        online=True,
                        heartbeat_at=self.ctx.db.now(),
                        run_id=self.run_id,
                    )
                )
            else:
                row.drivers = drivers
                row.conductor_group = self.ctx.settings.conductor_group
                row.online = True
                row.heartbeat_at = self.ctx.db.now()
                row.run_id = self.run_id
            session.execute(
                update(Node).where(Node.reservation == self.ctx.hostname).values(reservation=None)
            )
            session.execute(
                update(WorkItem)
                .where(WorkItem.state == queue.CLAIMED, WorkItem.lease_owner == self.ctx.hostname)
                # The previous run died holding them: a failed attempt each, so an
                # item that kills the process is dead-lettered, not run for ever.
                .values(
                    state=queue.PENDING,
                    lease_owner=None,
                    not_before=utcnow(),
                    failures=WorkItem.failures + 1,
                )
            )

        # What this conductor was working on without a node (allocations) when it
        # stopped: their items were handed back above; queue those that have none.
        for flow in catalog.DETACHED.values():
            flow.resume(self.ctx)

    # -- loops -----------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        failures = 0
        limit = self.ctx.settings.coordination.retry_count
        while not self.ctx.stopping.wait(self.ctx.settings.heartbeat_interval):
            try:
                self.heartbeat()
                failures = 0
            except Exception:
                failures += 1
                LOG.exception("heartbeat failed (%d of %d in a row)", failures, limit)
                if failures >= limit:
                    # Others will soon count this conductor dead and take its nodes;
                    # going on would act on a picture of the cluster it cannot check.
                    self._lost_coordination(f"the database failed {failures} heartbeats in a row")
                    return

    def heartbeat(self) -> None:
        with self.ctx.db.write() as session:
            result = session.execute(
                update(Conductor)
                .where(Conductor.hostname == self.ctx.hostname, Conductor.run_id == self.run_id)
                .values(heartbeat_at=self.ctx.db.now(), online=True)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                self._lost_hostname()
                return
            with self._running_lock:
                running = list(self._running)
            queue.renew(session, self.ctx.hostname, self._lease, running)
        if self.ctx.leaked_reservations:
            drop_leaked_reservations(self.ctx)

    def _periodic_loop(self) -> None:
        interval = self.ctx.settings.takeover_interval
        if interval <= 0:
            return
        while not self.ctx.stopping.wait(interval):
            try:
                self.take_over()
                with self.ctx.db.write() as session:
                    queue.purge_finished(session, dt.timedelta(hours=1))
            except Exception:
                LOG.exception("periodic task failed")

    def _adoption_loop(self, flow: DetachedFlow) -> None:
        """Adopt what dead conductors left unfinished of ``flow``, every interval."""
        interval = flow.adopt_interval(self.ctx.settings)
        if interval <= 0:
            return
        while not self.ctx.stopping.wait(interval):
            try:
                flow.adopt(self.ctx)
            except Exception:
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
            except Exception:
                LOG.exception("power state sync failed")

    def _dispatch_loop(self) -> None:
        while not self.ctx.stopping.is_set():
            claimed = 0
            try:
                claimed = self.dispatch_once()
            except Exception:
                LOG.exception("claiming work failed")
            if claimed == 0:
                self.ctx.waker.wait(self.ctx.settings.poll_interval)

    def dispatch_once(self) -> int:
        """Claim as many items as there are free workers and start them."""
        free = 0
        while self._slots.acquire(blocking=False):
            free += 1
        if free == 0:
            self._slots.acquire()
            free = 1
        if self.ctx.stopping.is_set():
            # The stop began while this waited for a worker: claim nothing more.
            for _ in range(free):
                self._slots.release()
            return 0
        try:
            with self.ctx.db.write() as session:
                live = list(
                    session.connection().scalars(
                        LIVE_CONDUCTORS, {"b_cutoff": live_cutoff(self.ctx)}
                    )
                )
                items = queue.claim(
                    session,
                    self.ctx.hostname,
                    limit=free,
                    lease=self._lease,
                    live_owners=live,
                    affinity_grace=dt.timedelta(seconds=self.ctx.settings.affinity_grace),
                )
                ready = self._lock_claimed(session, items)
        except BaseException:
            for _ in range(free):
                self._slots.release()
            raise
        for _ in range(free - len(ready)):
            self._slots.release()
        for item, node in ready:
            with self._running_lock:
                self._running.add(item.id)
            try:
                self._pool.submit(self._run_guarded, item, node)
            except RuntimeError:
                # The pool shut down (the stop began after the claim): give it back here.
                self._run_guarded(item, node)
        return len(items)

    def _lock_claimed(
        self, session: Session, items: list[queue.ClaimedItem]
    ) -> list[tuple[queue.ClaimedItem, dict[str, Any] | None]]:
        """Reserve the node of each claimed item in the claiming transaction.

        Claiming and locking are one write instead of two per item: on SQLite
        the service's writes run one at a time, so each one saved is
        throughput. An item whose node is locked goes back to the queue and
        one whose node is gone is finished, in the same transaction. Nodes are
        taken in id order, so two conductors claiming at once cannot deadlock.
        """
        host = self.ctx.hostname
        ready: list[tuple[queue.ClaimedItem, dict[str, Any] | None]] = []
        for item in sorted(items, key=lambda i: (i.node_id or 0, i.id)):
            if item.kind not in node_work.BY_KIND or item.node_id is None:
                ready.append((item, None))  # run_item reports it
                continue
            try:
                ready.append((item, lock(self.ctx, session, item.node_id)))
            except NodeLocked:
                queue.retry(session, item.id, host, LOCKED_RETRY_DELAY, count=False)
            except NodeGone:
                self._node_gone(session, item)
        return ready

    def _node_gone(self, session: Session, item: queue.ClaimedItem) -> None:
        """The item's node is not there: an introspection event is retried a few times
        (as the inspection design asks), then dropped; any other item is done at once."""
        host = self.ctx.hostname
        limit = self.ctx.settings.work_item_max_failures
        if item.kind != node_work.INSPECTION.kind:
            queue.finish(session, item.id, host)
        elif item.failures + 1 < limit:
            delay = float(2 ** min(item.failures + 1, 6))
            queue.retry(session, item.id, host, delay, failure="its node is gone")
        else:
            queue.finish(session, item.id, host, error="its node is gone")

    def _run_guarded(self, item: queue.ClaimedItem, node: dict[str, Any] | None) -> None:
        try:
            if self.ctx.stopping.is_set():
                self._give_back_unstarted(item, node)
            else:
                self.run_item(item, node)
        except Exception as exc:
            # Outside any step (the release itself, or a bug here): the item goes
            # back counting one failure, so it cannot be held or retried for ever.
            LOG.exception("work item %s (%s) failed unexpectedly", item.id, item.kind)
            self._let_go(item, f"{type(exc).__name__}: {exc}")
        finally:
            with self._running_lock:
                self._running.discard(item.id)
            self._slots.release()
            self.ctx.waker.notify()

    def _give_back_unstarted(self, item: queue.ClaimedItem, node: dict[str, Any] | None) -> None:
        """The conductor began to stop between claiming ``item`` and running it: the item
        and its node go back untouched, for another conductor now rather than after the
        lease.

        If the database refuses, the item waits for its lease to end (it never
        ran: nothing is owed but the claim) and the reservation is owed like
        any other a failed release leaves.
        """
        try:
            with self.ctx.db.write() as session:
                queue.retry(session, item.id, self.ctx.hostname, 0, count=False)
                if node is not None and item.node_id is not None:
                    unlock(self.ctx, session, item.node_id, int(node["epoch"]))
        except Exception:
            LOG.warning("work item %s could not be given back at stop", item.id, exc_info=True)
            if node is not None and item.node_id is not None:
                self.ctx.leaked_reservations.add((item.node_id, int(node["epoch"])))

    def _retry_failed(self, item: queue.ClaimedItem, failure: str) -> None:
        """Give the item back counting a failure, after a pause that grows with each (to 64 s)."""
        with self.ctx.db.write() as session:
            queue.retry(
                session,
                item.id,
                self.ctx.hostname,
                float(2 ** min(item.failures + 1, 6)),
                failure=scrub_message(failure),
            )

    def _let_go(self, item: queue.ClaimedItem, failure: str) -> None:
        try:
            self._retry_failed(item, failure)
        except Exception:
            # The lease is no longer renewed: the item expires and is claimed again.
            LOG.exception("work item %s could not be given back; its lease will expire", item.id)

    # -- running one item ------------------------------------------------
    def run_item(self, item: queue.ClaimedItem, locked: dict[str, Any] | None = None) -> None:
        """Run ``item`` under its node's reservation (``locked``: already taken for it)."""
        reason = self._give_up_reason(item)
        if reason is not None:
            self._give_up(item, locked, reason)
            return
        host = self.ctx.hostname
        detached = catalog.DETACHED.get(item.kind)
        if detached is not None:
            self._run_detached(detached, item)
            return
        work = node_work.BY_KIND.get(item.kind)
        if work is None or item.node_id is None:
            self._bury(item, f"unknown work kind {item.kind!r}")
            return
        try:
            payload = work.read(item.payload)
        except PayloadError as exc:
            self._give_up(item, locked, f"its request could not be read ({exc})")
            return
        try:
            with acquire(self.ctx, item.node_id, item.kind, locked=locked) as task:
                task.on_release(lambda session: queue.finish(session, item.id, host))
                try:
                    work.run(task, payload)
                except (Interrupted, LockLost, NodeGone):
                    raise
                except Exception as exc:
                    self._handle_bug(task, work, item, exc)
        except NodeLocked:
            with self.ctx.db.write() as session:
                queue.retry(session, item.id, host, LOCKED_RETRY_DELAY, count=False)
        except NodeGone:
            with self.ctx.db.write() as session:
                self._node_gone(session, item)
        except Interrupted:
            with self.ctx.db.write() as session:
                queue.retry(session, item.id, host, 0, count=False)
        except LockLost as exc:
            LOG.warning("item %s: %s", item.id, exc)
            self._finish(item, f"lock lost: {exc}")

    def _give_up_reason(self, item: queue.ClaimedItem) -> str | None:
        if item.unreadable is not None:
            return f"its request could not be read ({item.unreadable})"
        limit = self.ctx.settings.work_item_max_failures
        if item.failures >= limit:
            return f"it failed {item.failures} times (the limit is {limit})"
        return None

    def _give_up(self, item: queue.ClaimedItem, locked: dict[str, Any] | None, reason: str) -> None:
        """Dead-letter ``item`` and fail what it was for, so nothing waits on it for ever."""
        message = f"Gave up on the {item.kind} request: {reason}"
        LOG.error("work item %s on node id %s: %s", item.id, item.node_id, message)
        detached = catalog.DETACHED.get(item.kind)
        if detached is not None:
            detached.give_up(self.ctx, item, message)
            self._bury(item, message)
            return
        work = node_work.BY_KIND.get(item.kind)
        if item.node_id is None or work is None:
            self._bury(item, message)
            return
        host = self.ctx.hostname
        try:
            with acquire(self.ctx, item.node_id, item.kind, locked=locked) as task:
                task.on_release(lambda session: queue.bury(session, item.id, host, message))
                work.on_give_up(task, message)
        except NodeLocked:
            with self.ctx.db.write() as session:
                queue.retry(session, item.id, host, LOCKED_RETRY_DELAY, count=False)
        except (NodeGone, LockLost):
            self._bury(item, message)
        except Exception as exc:
            # Even failing the request failed (the node holds what this code cannot read):
            # the item is dead-lettered all the same, and the node says why, unreserved.
            LOG.exception("work item %s: failing its request failed", item.id)
            failure = f"{message}; failing the request failed: {type(exc).__name__}: {exc}"
            with self.ctx.db.write() as session:
                queue.bury(session, item.id, host, scrub_message(failure))
                note_unheld_failure(session, item.node_id, scrub_message(failure))

    def _bury(self, item: queue.ClaimedItem, reason: str) -> None:
        with self.ctx.db.write() as session:
            queue.bury(session, item.id, self.ctx.hostname, reason)

    def _run_detached(self, flow: DetachedFlow, item: queue.ClaimedItem) -> None:
        """Run an item of a flow that holds no node (it takes what it needs as it goes)."""
        try:
            done = flow.run(self.ctx, item)
        except Exception as exc:
            LOG.exception("work item %s (%s) failed unexpectedly", item.id, item.kind)
            flow.let_go(self.ctx, item)
            self._retry_failed(item, f"{type(exc).__name__}: {exc}")
            return
        if done is None:
            self._bury(item, f"the {item.kind} request names nothing to work on")
            return
        with self.ctx.db.write() as session:
            if done:
                queue.finish(session, item.id, self.ctx.hostname)
            else:
                queue.retry(session, item.id, self.ctx.hostname, 0.5)

    def _finish(self, item: queue.ClaimedItem, error: str | None) -> None:
        with self.ctx.db.write() as session:
            queue.finish(session, item.id, self.ctx.hostname, error=error)

    def _handle_bug(
        self, task: NodeTask, work: NodeWork[Any], item: queue.ClaimedItem, exc: Exception
    ) -> None:
        """An unexpected error in a handler fails the node's flow at once, like a failed step.

        Running it again would most likely fail the same way, with the node
        showing a step that is not running; the operator sees the error now.
        """
        LOG.exception("unexpected error running %s on node %s", item.kind, task.node.uuid)
        message = f"Unexpected {type(exc).__name__} during {item.kind}: {exc}"
        if task.released:
            return  # the flow already let go of the node; nothing more to undo here
        work.on_give_up(task, message)

    # -- takeover --------------------------------------------------------
    def take_over(self) -> int:
        """Queue the flow of every busy node that nobody is working on; returns how many."""
        busy = list(states.BUSY_STATES - states.HOLD_STATES)
        with self.ctx.db.write() as session:
            pending = exists().where(
                WorkItem.dedupe_key == literal(queue.PROVISION_KEY_PREFIX) + cast(Node.id, String)
            )
            # SKIP LOCKED: two conductors running this at once split the nodes
            # between them instead of both recording the same takeover.
            rows = session.execute(
                select(Node.id, Node.provision_state, Node.target_provision_state)
                .where(
                    Node.provision_state.in_(busy),
                    (Node.reservation.is_(None)) | Node.reservation.in_(dead_conductors(self.ctx)),
                    ~pending,
                )
                .with_for_update(skip_locked=True, of=Node)
            ).all()
            for node_id, state, target in rows:
                queue.enqueue_provision(session, node_id)
                history.record(
                    session,
                    node_id,
                    "takeover",
                    f"conductor {self.ctx.hostname} resumes the node's flow",
                    conductor=self.ctx.hostname,
                    state=state,
                    target=target,
                )
            if rows:
                LOG.info("took over %d node(s) nobody was working on", len(rows))
        if rows:
            self.ctx.waker.notify()
        return len(rows)
