"""Takeover: resume the flow of every busy node nobody is working on.

A node stays in a busy state when the conductor running its flow died (its
reservation names a conductor no longer heartbeating, or nobody holds it and
no provision work is queued). Any conductor may queue its flow again; the
flows are level-triggered, so the next owner continues from the node's state
and the flow progress saved before each step.
"""

from __future__ import annotations

import logging

from sqlalchemy import String, cast, exists, literal, select

from metalforge import states
from metalforge.conductor import history
from metalforge.conductor.context import ConductorContext
from metalforge.coordination.membership import dead_conductors
from metalforge.db import queue
from metalforge.db.models import Node, WorkItem

LOG = logging.getLogger(__name__)


def take_over(ctx: ConductorContext) -> int:
    """Queue the flow of every busy node that nobody is working on; returns how many."""
    busy = list(states.BUSY_STATES - states.HOLD_STATES)
    with ctx.db.write() as session:
        pending = exists().where(
            WorkItem.dedupe_key == literal(queue.PROVISION_KEY_PREFIX) + cast(Node.id, String)
        )
        # SKIP LOCKED: two conductors running this at once split the nodes
        # between them instead of both recording the same takeover.
        rows = session.execute(
            select(Node.id, Node.provision_state, Node.target_provision_state)
            .where(
                Node.provision_state.in_(busy),
                (Node.reservation.is_(None))
                | Node.reservation.in_(dead_conductors(ctx.db, ctx.dead_after)),
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
                f"conductor {ctx.hostname} resumes the node's flow",
                conductor=ctx.hostname,
                state=state,
                target=target,
            )
        if rows:
            LOG.info("took over %d node(s) nobody was working on", len(rows))
    if rows:
        ctx.waker.notify()
    return len(rows)
