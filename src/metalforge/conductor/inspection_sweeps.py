"""The inspection service's periodic clean-up, as singleton tasks.

Three tasks, each run by one conductor at a time (``leadership``): time out
inspections whose ramdisk never reported, forget the records of deleted
nodes, and expire raw reports. Each is idempotent, so a leader replaced in
the middle of a run leaves nothing the next run would not finish, and each
writes under its term (``LeaderTerm.write``), so a replaced leader's late
write is refused rather than made next to its successor's. A timed
out inspection is not failed here: a ``timeout`` work item is queued (one
per inspection, de-duplicated), and the worker that runs it holds the node,
so a report being processed at that moment is never cut short.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import select

from metalforge import inspection_states as ins
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.flows import inspection_events
from metalforge.conductor.leadership import LeaderTerm, SingletonTask
from metalforge.db import introspections, queue
from metalforge.db.engine import now_for
from metalforge.db.models import Node

LOG = logging.getLogger(__name__)

TIMED_OUT_STATES = [ins.STARTING, ins.WAITING]
"""Where an inspection waits on the node (to boot, to report); processing is bounded
by its work item's lease instead."""


def time_out_inspections(term: LeaderTerm) -> int:
    """Queue a ``timeout`` for each inspection past ``inspection.timeout``; how many."""
    ctx = term.ctx
    with term.write() as session:
        cutoff = now_for(session) - dt.timedelta(seconds=ctx.settings.inspection.timeout)
        late = introspections.waiting_since(session, TIMED_OUT_STATES, cutoff)
        rows = session.execute(
            select(Node.uuid, Node.id).where(Node.uuid.in_([r.node_uuid for r in late]))
        ).all()
        ids: dict[str, int] = {row.uuid: row.id for row in rows}
        queued = 0
        for record in late:
            node_id = ids.get(record.node_uuid)
            if node_id is None:
                continue  # the node is gone; its record goes with the next sync
            queue.enqueue(
                session,
                inspection_events.WORK_KIND,
                node_id,
                inspection_events.event_payload(ins.TIMEOUT, record),
                dedupe_key=inspection_events.timeout_key(record),
            )
            queued += 1
    if queued:
        LOG.info("inspection timeouts queued: %d", queued)
        ctx.waker.notify()
    return queued


def forget_deleted_nodes(term: LeaderTerm) -> int:
    """Remove the inspection records and data of nodes no longer enrolled; how many."""
    with term.write() as session:
        forgotten = introspections.forget_deleted_nodes(session)
    if forgotten:
        LOG.info("inspection records of deleted nodes removed: %d", forgotten)
    return forgotten


def expire_reports(term: LeaderTerm) -> int:
    """Drop raw reports older than ``inspection.data_expiry``; how many."""
    expiry = dt.timedelta(seconds=term.ctx.settings.inspection.data_expiry)
    with term.write() as session:
        expired = introspections.expire_raw_data(session, now_for(session) - expiry)
    if expired:
        LOG.info("raw inspection reports expired: %d", expired)
    return expired


def _clean_up_period(ctx: ConductorContext) -> float:
    return ctx.settings.inspection.clean_up_period


TASKS = (
    SingletonTask("inspection-timeouts", _clean_up_period, time_out_inspections),
    SingletonTask("inspection-sync", _clean_up_period, forget_deleted_nodes),
    SingletonTask("inspection-expiry", _clean_up_period, expire_reports),
)
"""The inspection service's singleton periodic tasks."""
