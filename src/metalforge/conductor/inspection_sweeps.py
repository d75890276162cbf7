"""The inspection service's periodic clean-up: timeouts, deleted nodes, expired reports.

Run by one process at a time (the leader of the ``inspection-sweeps`` role,
see ``leadership``); each part is idempotent anyway, so a leader that is
replaced in the middle of a sweep leaves nothing half done that the next
sweep would not finish. A timed-out inspection is not failed here: a
``timeout`` work item is queued (one per inspection, de-duplicated), and
the worker that runs it holds the node, so a report being processed at
that moment is never cut short.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from sqlalchemy import select

from metalforge import inspection_states as ins
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.flows import inspection
from metalforge.db import introspections, queue
from metalforge.db.engine import now_for
from metalforge.db.models import Node

LOG = logging.getLogger(__name__)

TIMED_OUT_STATES = [ins.STARTING, ins.WAITING]
"""Where an inspection waits on the node (to boot, to report); processing is bounded
by its work item's lease instead."""


@dataclass(frozen=True)
class SweepReport:
    timed_out: int
    forgotten: int
    expired: int


def sweep(ctx: ConductorContext) -> SweepReport:
    """One clean-up pass; returns what it did."""
    settings = ctx.settings.inspection
    with ctx.db.write() as session:
        now = now_for(session)
        late = introspections.waiting_since(
            session, TIMED_OUT_STATES, now - dt.timedelta(seconds=settings.timeout)
        )
        rows = session.execute(
            select(Node.uuid, Node.id).where(Node.uuid.in_([r.node_uuid for r in late]))
        ).all()
        ids: dict[str, int] = {row.uuid: row.id for row in rows}
        timed_out = 0
        for record in late:
            node_id = ids.get(record.node_uuid)
            if node_id is None:
                continue  # the node is gone; forgotten below
            queue.enqueue(
                session,
                inspection.WORK_KIND,
                node_id,
                inspection.event_payload(ins.TIMEOUT, record),
                dedupe_key=inspection.timeout_key(record),
            )
            timed_out += 1
        forgotten = introspections.forget_deleted_nodes(session)
        expired = introspections.expire_raw_data(
            session, now - dt.timedelta(seconds=settings.data_expiry)
        )
    if timed_out:
        ctx.waker.notify()
    report = SweepReport(timed_out, forgotten, expired)
    if timed_out or forgotten or expired:
        LOG.info("inspection sweep: %s", report)
    return report
