"""Running one claimed work item, and what happens when it cannot run.

An item of a node's work kind (``node_work``) runs under the node's
reservation; a detached flow's item (allocation matching) runs without one.
A payload that cannot be read, or an item past its failure budget, is
dead-lettered and what it was for is failed (``NodeWork.on_give_up``), so
nothing waits on it for ever. A call that outlives its kind's deadline is
abandoned (``deadlines``): the node is taken again at a new epoch, which
fences the call out, and what the item was for fails. An unexpected error fails what the request was
for at once; an error outside any run gives the item back counting a
failure, with a pause that grows with each.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from metalforge.conductor import node_work
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.deadlines import Overdue, run_with_deadline
from metalforge.conductor.flows import catalog
from metalforge.conductor.flows.spec import DetachedFlow
from metalforge.conductor.reservations import acquire, note_unheld_failure, retake, unlock
from metalforge.conductor.task import Interrupted, LockLost, NodeGone, NodeTask
from metalforge.conductor.work import NodeWork, PayloadError
from metalforge.db import queue
from metalforge.db.engine import lost_connection
from metalforge.db.tallies import count_on_commit, counted
from metalforge.errors import NodeLocked
from metalforge.redaction import scrub_message
from metalforge.tallies import WORK_ABANDONED

LOG = logging.getLogger(__name__)

LOCKED_RETRY_DELAY = 0.2
"""Seconds before retrying an item whose node another conductor holds."""


def run_item(
    ctx: ConductorContext, item: queue.ClaimedItem, locked: dict[str, Any] | None = None
) -> None:
    """Run ``item`` under its node's reservation (``locked``: already taken for it)."""
    reason = _give_up_reason(ctx, item)
    if reason is not None:
        _give_up(ctx, item, locked, reason)
        return
    detached = catalog.DETACHED.get(item.kind)
    if detached is not None:
        _run_detached(ctx, detached, item)
        return
    work = node_work.BY_KIND.get(item.kind)
    if work is None or item.node_id is None:
        _bury(ctx, item, f"unknown work kind {item.kind!r}")
        return
    try:
        payload = work.read(item.payload)
    except PayloadError as exc:
        _give_up(ctx, item, locked, f"its request could not be read ({exc})")
        return
    try:
        _run_on_node(ctx, item, item.node_id, work, payload, locked)
    except NodeLocked:
        with ctx.db.write() as session:
            queue.retry(session, item.id, ctx.hostname, LOCKED_RETRY_DELAY, count=False)
    except NodeGone:
        with ctx.db.write() as session:
            node_gone(ctx, session, item)
    except Interrupted:
        with ctx.db.write() as session:
            queue.retry(session, item.id, ctx.hostname, 0, count=False)
    except LockLost as exc:
        LOG.warning("item %s: %s", item.id, exc)
        _finish(ctx, item, f"lock lost: {exc}")
    except Exception as exc:  # re-raised unless the database went away
        if not lost_connection(exc):
            raise
        _wait_for_database(ctx, item, exc)


def _run_on_node(
    ctx: ConductorContext,
    item: queue.ClaimedItem,
    node_id: int,
    work: NodeWork[Any],
    payload: Any,
    locked: dict[str, Any] | None,
) -> None:
    """Take the node, run the work within its deadline, and fail what overran it.

    A bug in the work fails the node's flow; what says the node or the lock
    went away, or the database did, is raised for ``run_item`` to route.
    """
    host = ctx.hostname
    overdue: Overdue | None = None
    with acquire(ctx, node_id, item.kind, locked=locked) as task:
        task.on_release(lambda session: queue.finish(session, item.id, host))
        try:
            overdue = run_with_deadline(ctx.settings, ctx.abandoned, work, task, payload)
        except (Interrupted, LockLost, NodeGone):
            raise
        except Exception as exc:  # a step's bug fails its node, not the worker
            if lost_connection(exc):
                raise  # not the request's fault: it runs again once the database is back
            _handle_bug(ctx, task, work, item, exc)
    if overdue is not None:
        _fail_overdue(ctx, work, item, node_id, task.epoch, overdue)


def _wait_for_database(ctx: ConductorContext, item: queue.ClaimedItem, exc: Exception) -> None:
    """The database went out of reach under the item: it is given back, not failed and
    not counted, to run again from the node's saved progress once the database answers.

    The worker waits for the database to give it back (``database.retry_*``); if
    it never does, the item's lease runs out and it is claimed again. The node's
    reservation is owed (``leaked_reservations``) until the heartbeat gives it back.
    """
    LOG.warning(
        "work item %s (%s) stopped: the database is out of reach: %s", item.id, item.kind, exc
    )

    def give_back() -> None:
        with ctx.db.write() as session:
            queue.retry(session, item.id, ctx.hostname, 0, count=False)

    try:
        ctx.db.retrying(give_back, ctx.stopping)
    except SQLAlchemyError:
        LOG.warning("work item %s could not be given back; its lease will expire", item.id)


def _fail_overdue(
    ctx: ConductorContext,
    work: NodeWork[Any],
    item: queue.ClaimedItem,
    node_id: int,
    epoch: int,
    overdue: Overdue,
) -> None:
    """Fail what an abandoned item was for, on the node taken again past the call's epoch."""
    host = ctx.hostname

    def finish(session: Session) -> None:
        queue.finish(session, item.id, host, error=overdue.message)
        count_on_commit(session, counted(WORK_ABANDONED, (item.kind,)))

    with ctx.db.write() as session:
        row = retake(ctx, session, node_id, epoch)
    with acquire(ctx, node_id, item.kind, locked=row) as task:
        task.on_release(finish)
        work.on_give_up(task, overdue.message)


def _give_up_reason(ctx: ConductorContext, item: queue.ClaimedItem) -> str | None:
    if item.unreadable is not None:
        return f"its request could not be read ({item.unreadable})"
    limit = ctx.settings.work_item_max_failures
    if item.failures >= limit:
        return f"it failed {item.failures} times (the limit is {limit})"
    return None


def _give_up(
    ctx: ConductorContext, item: queue.ClaimedItem, locked: dict[str, Any] | None, reason: str
) -> None:
    """Dead-letter ``item`` and fail what it was for, so nothing waits on it for ever."""
    message = f"Gave up on the {item.kind} request: {reason}"
    LOG.error("work item %s on node id %s: %s", item.id, item.node_id, message)
    detached = catalog.DETACHED.get(item.kind)
    if detached is not None:
        detached.give_up(ctx, item, message)
        _bury(ctx, item, message)
        return
    work = node_work.BY_KIND.get(item.kind)
    if item.node_id is None or work is None:
        _bury(ctx, item, message)
        return
    host = ctx.hostname
    try:
        with acquire(ctx, item.node_id, item.kind, locked=locked) as task:
            task.on_release(lambda session: queue.bury(session, item.id, host, message))
            work.on_give_up(task, message)
    except NodeLocked:
        with ctx.db.write() as session:
            queue.retry(session, item.id, host, LOCKED_RETRY_DELAY, count=False)
    except (NodeGone, LockLost):
        _bury(ctx, item, message)
    except Exception as exc:  # even a bug here must dead-letter the item
        # Even failing the request failed (the node holds what this code cannot read):
        # the item is dead-lettered all the same, and the node says why, unreserved.
        LOG.exception("work item %s: failing its request failed", item.id)
        failure = f"{message}; failing the request failed: {type(exc).__name__}: {exc}"
        with ctx.db.write() as session:
            queue.bury(session, item.id, host, scrub_message(failure))
            note_unheld_failure(session, item.node_id, scrub_message(failure))


def _bury(ctx: ConductorContext, item: queue.ClaimedItem, reason: str) -> None:
    with ctx.db.write() as session:
        queue.bury(session, item.id, ctx.hostname, reason)


def _run_detached(ctx: ConductorContext, flow: DetachedFlow, item: queue.ClaimedItem) -> None:
    """Run an item of a flow that holds no node (it takes what it needs as it goes)."""
    try:
        done = flow.run(ctx, item)
    except Exception as exc:  # a flow's bug fails its item, not the worker
        LOG.exception("work item %s (%s) failed unexpectedly", item.id, item.kind)
        flow.let_go(ctx, item)
        _retry_failed(ctx, item, f"{type(exc).__name__}: {exc}")
        return
    if done is None:
        _bury(ctx, item, f"the {item.kind} request names nothing to work on")
        return
    with ctx.db.write() as session:
        if done:
            queue.finish(session, item.id, ctx.hostname)
        else:
            queue.retry(session, item.id, ctx.hostname, 0.5)


def _finish(ctx: ConductorContext, item: queue.ClaimedItem, error: str | None) -> None:
    with ctx.db.write() as session:
        queue.finish(session, item.id, ctx.hostname, error=error)


def _handle_bug(
    ctx: ConductorContext,
    task: NodeTask,
    work: NodeWork[Any],
    item: queue.ClaimedItem,
    exc: Exception,
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


def node_gone(ctx: ConductorContext, session: Session, item: queue.ClaimedItem) -> None:
    """The item's node is not there: an introspection event is retried a few times
    (as the inspection design asks), then dropped; any other item is done at once."""
    host = ctx.hostname
    limit = ctx.settings.work_item_max_failures
    if item.kind != node_work.INSPECTION.kind:
        queue.finish(session, item.id, host)
    elif item.failures + 1 < limit:
        delay = float(2 ** min(item.failures + 1, 6))
        queue.retry(session, item.id, host, delay, failure="its node is gone")
    else:
        queue.finish(session, item.id, host, error="its node is gone")


def give_back_unstarted(
    ctx: ConductorContext, item: queue.ClaimedItem, node: dict[str, Any] | None
) -> None:
    """The conductor began to stop between claiming ``item`` and running it: the item
    and its node go back untouched, for another conductor now rather than after the
    lease.

    If the database refuses, the item waits for its lease to end (it never
    ran: nothing is owed but the claim) and the reservation is owed like
    any other a failed release leaves.
    """
    try:
        with ctx.db.write() as session:
            queue.retry(session, item.id, ctx.hostname, 0, count=False)
            if node is not None and item.node_id is not None:
                unlock(ctx, session, item.node_id, int(node["epoch"]))
    except SQLAlchemyError:
        LOG.warning("work item %s could not be given back at stop", item.id, exc_info=True)
        if node is not None and item.node_id is not None:
            ctx.leaked_reservations.add((item.node_id, int(node["epoch"])))


def _retry_failed(ctx: ConductorContext, item: queue.ClaimedItem, failure: str) -> None:
    """Give the item back counting a failure, after a pause that grows with each (to 64 s)."""
    with ctx.db.write() as session:
        queue.retry(
            session,
            item.id,
            ctx.hostname,
            float(2 ** min(item.failures + 1, 6)),
            failure=scrub_message(failure),
        )


def let_go(ctx: ConductorContext, item: queue.ClaimedItem, failure: str) -> None:
    try:
        _retry_failed(ctx, item, failure)
    except Exception:  # the worker's last resort: nothing above reports
        # The lease is no longer renewed: the item expires and is claimed again.
        LOG.exception("work item %s could not be given back; its lease will expire", item.id)
