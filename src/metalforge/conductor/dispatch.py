"""The dispatcher: claim as many items as there are free workers, and start them.

Claiming an item and reserving its node are one transaction (on SQLite the
writes run one at a time, so each one saved is throughput). The dispatcher
knows which items its workers run: the heartbeat renews only their leases.

At most ``workers_per_project`` of the workers run one project's nodes: an
item of a project that has its share goes back to the queue, so a tenant
whose BMCs or image servers are slow cannot take every worker from the
others. The deployment's own nodes (no owner, no lessee: a project's
member cannot enroll one) are not a tenant's and may use every worker.

A claim whose commit fails may still have been committed (the connection
dropped after the server received the COMMIT): its items and reservations
are owed back until a later round gives them back, fenced by owner and
epoch so that a claim that never landed is left alone.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy.orm import Session

from metalforge.conductor import node_work, running
from metalforge.conductor.context import ConductorContext, project_of
from metalforge.conductor.flows import catalog
from metalforge.conductor.reservations import lock, unlock
from metalforge.conductor.task import NodeGone
from metalforge.coordination.membership import LIVE_CONDUCTORS, live_cutoff
from metalforge.db import queue
from metalforge.errors import NodeLocked

LOG = logging.getLogger(__name__)

KNOWN_KINDS: tuple[str, ...] = tuple(sorted({*node_work.BY_KIND, *catalog.DETACHED}))
"""The kinds this conductor can run, and so the only ones it claims: during a rolling
upgrade a newer API may queue a kind an older conductor does not know, and that item
must wait for a newer conductor rather than be dead-lettered by this one."""

PROJECT_FULL_DELAY = 2.0
"""Seconds an item whose project has its share of the workers waits before it is claimed
again (``conductor.workers_per_project``)."""


Claimed = tuple[queue.ClaimedItem, dict[str, Any] | None]
"""An item with its node's row as reserved for it (``None``: it holds no node)."""


def _project(node: dict[str, Any]) -> str:
    return project_of(node.get("lessee"), node.get("owner"))


class Dispatcher:
    """Claims work for this conductor's workers; ``shutdown`` when the conductor stops."""

    def __init__(self, ctx: ConductorContext) -> None:
        self.ctx = ctx
        self._pool = ThreadPoolExecutor(ctx.settings.workers, thread_name_prefix="conductor")
        self._slots = threading.Semaphore(ctx.settings.workers)
        self.lease = dt.timedelta(seconds=ctx.settings.lease_seconds)
        self._running: set[int] = set()
        self._projects: dict[int, str] = {}
        """The project each running item's node belongs to (``project_of``)."""
        self._per_project: Counter[str] = Counter()
        self._running_lock = threading.Lock()
        self._idle = threading.Condition(self._running_lock)
        self._owed: list[Claimed] = []
        """Claims whose commit failed without saying whether it landed (dispatcher thread only)."""

    def running(self) -> list[int]:
        """The items this conductor's workers are running now."""
        with self._running_lock:
            return list(self._running)

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the running items to end; whether they did.

        Once the conductor is stopping, an item in a wait (a step's sleep, the
        power-on throttle) gives itself back at once; one inside a driver call
        ends when the call does.
        """
        with self._idle:
            return self._idle.wait_for(lambda: not self._running, timeout)

    def shutdown(self) -> None:
        # Not cancelled: an item handed over just before the stop may still wait
        # for a worker, and it holds its node; it gives both back.
        self._pool.shutdown(wait=False)

    def loop(self) -> None:
        while not self.ctx.stopping.is_set():
            claimed = 0
            try:
                claimed = self.dispatch_once()
            except Exception:  # the claiming loop outlives any failure
                LOG.exception("claiming work failed")
            if claimed == 0:
                self.ctx.waker.wait(self.ctx.settings.poll_interval)

    def dispatch_once(self) -> int:
        """Claim as many items as there are free workers and start them."""
        if self._owed:
            self._give_back_owed()
        if self._too_many_abandoned():
            return 0
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
        ready: list[Claimed] = []
        try:
            with self.ctx.db.write() as session:
                live = list(
                    session.connection().scalars(
                        LIVE_CONDUCTORS, {"b_cutoff": live_cutoff(self.ctx.db, self.ctx.dead_after)}
                    )
                )
                items = queue.claim(
                    session,
                    self.ctx.hostname,
                    limit=free,
                    lease=self.lease,
                    live_owners=live,
                    affinity_grace=dt.timedelta(seconds=self.ctx.settings.affinity_grace),
                    kinds=KNOWN_KINDS,
                )
                ready = self._lock_claimed(session, items)
        except BaseException:  # re-raised: whatever ended it, the slots go back
            for _ in range(free):
                self._slots.release()
            # Set only once every statement ran: the commit failed, and may have landed.
            self._owed.extend(ready)
            raise
        for _ in range(free - len(ready)):
            self._slots.release()
        for item, node in ready:
            self._start(item, node)
        return len(items)

    def _start(self, item: queue.ClaimedItem, node: dict[str, Any] | None) -> None:
        with self._running_lock:
            self._running.add(item.id)
            if node is not None:
                project = _project(node)
                self._projects[item.id] = project
                self._per_project[project] += 1
        try:
            self._pool.submit(self._run_guarded, item, node)
        except RuntimeError:
            # The pool shut down (the stop began after the claim): give it back here.
            self._run_guarded(item, node)

    def _give_back_owed(self) -> None:
        """Give back the items and reservations of claims whose commit may have landed.

        No worker runs them (they were never started), and this conductor,
        alive, renews no lease of theirs and could not take their nodes
        again: left alone, each item would wait for its lease to run out and
        then find its node held for ever. Raises while the database is still
        out of reach; the next round tries again.
        """
        with self.ctx.db.write() as session:
            for item, node in self._owed:
                queue.retry(session, item.id, self.ctx.hostname, 0, count=False)
                if node is not None and item.node_id is not None:
                    unlock(self.ctx, session, item.node_id, int(node["epoch"]))
        LOG.warning("gave back %d work items whose claim's commit was lost", len(self._owed))
        self._owed.clear()

    def _too_many_abandoned(self) -> bool:
        """Whether so many abandoned calls still run that claiming more could pile up
        threads without bound (``deadlines``): this conductor waits for some to end,
        and the others take the queue meanwhile."""
        running = self.ctx.abandoned.running()
        if len(running) < self.ctx.settings.max_abandoned_calls:
            return False
        LOG.error(
            "%d abandoned calls still run (max_abandoned_calls is %d), among them %s; "
            "claiming no work until some end",
            len(running),
            self.ctx.settings.max_abandoned_calls,
            running[0],
        )
        return True

    def _lock_claimed(self, session: Session, items: list[queue.ClaimedItem]) -> list[Claimed]:
        """Reserve the node of each claimed item in the claiming transaction.

        An item whose node is locked goes back to the queue and one whose node
        is gone is finished, in the same transaction. Nodes are taken in id
        order, so two conductors claiming at once cannot deadlock.
        """
        host = self.ctx.hostname
        ready: list[Claimed] = []
        with self._running_lock:
            taken = Counter(self._per_project)
        taken.update(self.ctx.abandoned.by_project())
        for item in sorted(items, key=lambda i: (i.node_id or 0, i.id)):
            if item.kind not in node_work.BY_KIND or item.node_id is None:
                ready.append((item, None))  # run_item reports it
                continue
            try:
                node = lock(self.ctx, session, item.node_id)
                project = _project(node)
                if project and taken[project] >= self.ctx.settings.workers_per_project:
                    # The project has its share of the workers: the item waits for one
                    # of them to end, and the other projects' work goes first.
                    unlock(self.ctx, session, item.node_id, int(node["epoch"]))
                    queue.retry(session, item.id, host, PROJECT_FULL_DELAY, count=False)
                    continue
                taken[project] += 1
                ready.append((item, node))
            except NodeLocked:
                queue.retry(session, item.id, host, running.LOCKED_RETRY_DELAY, count=False)
            except NodeGone:
                running.node_gone(self.ctx, session, item)
        return ready

    def _run_guarded(self, item: queue.ClaimedItem, node: dict[str, Any] | None) -> None:
        try:
            if self.ctx.stopping.is_set():
                running.give_back_unstarted(self.ctx, item, node)
            else:
                running.run_item(self.ctx, item, node)
        except Exception as exc:  # a worker thread outlives any failure
            # Outside any step (the release itself, or a bug here): the item goes
            # back counting one failure, so it cannot be held or retried for ever.
            LOG.exception("work item %s (%s) failed unexpectedly", item.id, item.kind)
            running.let_go(self.ctx, item, f"{type(exc).__name__}: {exc}")
        finally:
            with self._idle:
                self._running.discard(item.id)
                project = self._projects.pop(item.id, None)
                if project is not None:
                    self._per_project[project] -= 1
                    if self._per_project[project] <= 0:
                        del self._per_project[project]
                self._idle.notify_all()
            self._slots.release()
            self.ctx.waker.notify()
