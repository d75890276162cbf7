"""Advancing rollouts: the loop one conductor at a time runs over the live rollouts.

Each round settles the nodes under way from their provision state (succeeded, failed, or
started again when their start was lost), then starts the next wave when the previous
one has finished, the canary has been resumed past and the window is open, and ends the
rollout when its nodes are done or its failure budget is spent (``rollouts`` says what
a rollout is and how it is created).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.db.models import Node, Rollout, RolloutNode, utcnow
from metalforge.errors import RequestError
from metalforge.services import provisioning
from metalforge.services.context import Services
from metalforge.services.microversion import NEWEST
from metalforge.services.rollouts import (
    CANARY_DONE,
    DONE,
    FAILED,
    LIVE,
    N_FAILED,
    N_PENDING,
    N_RUNNING,
    N_SUCCEEDED,
    PAUSED,
    PENDING,
    RUNNING,
    STOPPED,
    flow_request,
    rows_of,
    skip_pending,
)

LOG = logging.getLogger(__name__)

END_STATE = {
    states.MANAGE: states.MANAGEABLE,
    states.CLEAN: states.MANAGEABLE,
    states.SERVICE: states.ACTIVE,
    states.PROVIDE: states.AVAILABLE,
    states.INSPECT: states.MANAGEABLE,
}
"""Where each verb's flow leaves a node that went through it well."""

Write = Callable[[], AbstractContextManager[Session]]
"""Opens a write transaction (the leader's, whose commit checks its term)."""


def _verdict(row: RolloutNode, node: Node) -> tuple[str, str | None]:
    """A running node's state in the rollout now: (node state, error); ``pending`` means
    its start was lost and it is to be started again."""
    state = node.provision_state
    if state in states.BUSY_STATES:
        return N_RUNNING, None
    moved = node.provision_updated_at is not None and (
        row.started_at is None or node.provision_updated_at >= row.started_at
    )
    if not moved:  # even from a failed state (``manage`` after ``clean failed``)
        return N_PENDING, None
    info = states.STATES.get(state)
    if info is not None and info.failure:
        return N_FAILED, node.last_error or f"its flow failed: the node is {state}"
    if state == END_STATE.get(row.verb):
        return N_SUCCEEDED, None
    return N_FAILED, f"the node left the rollout's flow: it is {state}"


def window_open(start: int | None, end: int | None, now: dt.datetime) -> bool:
    """Whether ``now`` (UTC) is within the hours ``start`` to ``end`` (none: always);
    ``22`` to ``6`` spans midnight."""
    if start is None or end is None:
        return True
    hour = now.hour
    return start <= hour < end if start <= end else hour >= start or hour < end


@dataclass(frozen=True)
class _Start:
    row_id: int
    node_uuid: str
    verb: str
    steps: list[dict[str, Any]]
    disable_ramdisk: bool


def advance(svc: Services, write: Write | None = None) -> None:
    """One round over every rollout that is live or still has nodes under way."""
    opener = write or svc.db.write
    with svc.db.read() as session:
        under_way = select(RolloutNode.rollout_id).where(RolloutNode.state == N_RUNNING)
        ids = list(
            session.scalars(
                select(Rollout.id)
                .where(Rollout.state.in_(LIVE) | Rollout.id.in_(under_way))
                .order_by(Rollout.id)
            )
        )
    for rollout_id in ids:
        try:
            _advance_one(svc, opener, rollout_id)
        except Exception:  # one rollout's trouble must not stop the others
            LOG.exception("advancing rollout %d failed", rollout_id)


def _advance_one(svc: Services, write: Write, rollout_id: int) -> None:
    with write() as session:
        rollout = session.get(Rollout, rollout_id, with_for_update=True)
        if rollout is None:
            return
        rows = rows_of(session, [rollout_id])[rollout_id]
        starts = _settle(session, rollout, rows)
        starts += _next_wave(rollout, rows)
        _finish_if_over(rollout, rows)
    for start in starts:
        _start(svc, write, rollout, start)


def _settle(session: Session, rollout: Rollout, rows: Sequence[RolloutNode]) -> list[_Start]:
    """Record how the nodes under way are doing; the ones whose start was lost."""
    again = []
    now = utcnow()
    for row in rows:
        if row.state != N_RUNNING:
            continue
        node = session.get(Node, row.node_id)
        if node is None:
            continue
        verdict, error = _verdict(row, node)
        if verdict == N_SUCCEEDED and not row.last_stage:
            # On to the node's next flow (an available node's: clean, then provide), even
            # in a paused or stopped rollout: a node under way finishes what it began.
            row.stage += 1
            verdict = N_PENDING
        if verdict == N_PENDING:
            row.started_at = now
            again.append(_Start(row.id, row.node_uuid, row.verb, row.steps, row.disable_ramdisk))
        elif verdict != N_RUNNING:
            row.state, row.error, row.outcome = verdict, error, node.provision_state
            row.finished_at, row.claim = now, None
    failed = sum(1 for r in rows if r.state == N_FAILED)
    if rollout.state in (PENDING, RUNNING, PAUSED) and failed > rollout.max_failures:
        rollout.state = FAILED
        rollout.last_error = f"{failed} nodes failed, more than the {rollout.max_failures} allowed"
        rollout.updated_at = now
        skip_pending(session, rollout, "the rollout failed")
        session.flush()
        for row in rows:
            session.refresh(row)
    return again


def _next_wave(rollout: Rollout, rows: Sequence[RolloutNode]) -> list[_Start]:
    """Mark the next wave's nodes started, when the last one has finished."""
    if rollout.state == PENDING:
        rollout.state = RUNNING
    if rollout.state != RUNNING or not window_open(
        rollout.window_start, rollout.window_end, utcnow()
    ):
        return []
    open_rows = [r for r in rows if r.state in (N_PENDING, N_RUNNING)]
    if not open_rows:
        return []
    wave = min(r.wave for r in open_rows)
    current = [r for r in open_rows if r.wave == wave]
    if any(r.state == N_RUNNING for r in current):
        return []
    if wave > 0 and rollout.canary > 0 and not rollout.canary_approved:
        rollout.state, rollout.paused_reason = PAUSED, CANARY_DONE
        rollout.updated_at = utcnow()
        return []
    now = utcnow()
    starts = []
    for row in current:
        row.state, row.started_at = N_RUNNING, now
        starts.append(_Start(row.id, row.node_uuid, row.verb, row.steps, row.disable_ramdisk))
    return starts


def _finish_if_over(rollout: Rollout, rows: Sequence[RolloutNode]) -> None:
    if any(r.state in (N_PENDING, N_RUNNING) for r in rows):
        return
    if rollout.state in (PENDING, RUNNING):
        rollout.state = DONE
    if rollout.finished_at is None and rollout.state in (DONE, STOPPED, FAILED):
        rollout.finished_at = utcnow()
        rollout.updated_at = rollout.finished_at


def _start(svc: Services, write: Write, rollout: Rollout, start: _Start) -> None:
    """Start one node's flow; a refusal fails the node, a lock leaves it for the next round."""
    actor = f"rollout {rollout.uuid}" + (f" by {rollout.created_by}" if rollout.created_by else "")
    request = flow_request(start.verb, start.steps, start.disable_ramdisk)
    try:
        provisioning.start(svc, start.node_uuid, NEWEST, request, actor)
    except RequestError as exc:
        if exc.status == 409:  # locked for a moment (a power sync): the next round retries
            return
        LOG.info("rollout %s: node %s refused: %s", rollout.uuid, start.node_uuid, exc.message)
        with write() as session:
            session.execute(
                update(RolloutNode)
                .where(RolloutNode.id == start.row_id)
                .values(
                    state=N_FAILED,
                    error=f"its flow could not start: {exc.message}",
                    finished_at=utcnow(),
                    claim=None,
                )
            )
