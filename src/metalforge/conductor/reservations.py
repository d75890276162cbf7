"""Taking and giving back a node's reservation.

``with acquire(ctx, node_id, "deploy") as task:`` takes the node for this
conductor (``lock``: the reservation and a new epoch, in one conditional
write) and releases it when the block ends, saving what the work changed. A
reservation held by a conductor that stopped heartbeating (or by a holder
that is no live conductor) may be taken at once. Any failure gives the
reservation back: a release that cannot write what the work changed gives
the node back bare, and one the database refuses is owed
(``ctx.leaked_reservations``) until the heartbeat manages it.

Who counts as a live conductor is ``metalforge.coordination.membership``'s
answer, the same the hash ring and the election read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from sqlalchemy import Table, bindparam, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from metalforge.conductor import history
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.node_writes import HELD_BY_TASK
from metalforge.conductor.task import LockLost, NodeGone, NodeTask
from metalforge.coordination.membership import LIVE_CONDUCTORS, live_cutoff
from metalforge.db import flow_progress
from metalforge.db.models import FlowProgressRow, Node, node_from_row
from metalforge.db.tallies import count_on_commit, counted
from metalforge.errors import NodeLocked
from metalforge.tallies import TAKEOVERS

LOG = logging.getLogger(__name__)

_NODES = cast(Table, Node.__table__)

_PROGRESS = cast(Table, FlowProgressRow.__table__)
_READ = (
    select(_NODES, *flow_progress.JOINED_COLUMNS)
    .select_from(_NODES.outerjoin(_PROGRESS, _PROGRESS.c.node_id == _NODES.c.id))
    .where(_NODES.c.id == bindparam("b_id"))
    .with_for_update(of=_NODES)
)
"""The node and its flow progress, in the one statement the lock runs anyway."""
_TAKE = (
    update(_NODES)
    .where(
        _NODES.c.id == bindparam("b_id"),
        or_(
            _NODES.c.reservation.is_(None),
            _NODES.c.reservation.not_in(LIVE_CONDUCTORS),  # a dead holder's is free
        ),
    )
    .values(
        reservation=bindparam("b_host"),
        epoch=_NODES.c.epoch + 1,
        conductor_affinity=bindparam("b_host"),
    )
)


def lock(ctx: ConductorContext, session: Session, node_id: int) -> dict[str, Any]:
    """Take node ``node_id``'s reservation in the caller's transaction.

    Returns the node's columns as they are now, and its flow progress's
    (``flow_progress.JOINED_COLUMNS``), for ``acquire``, which builds the
    node outside the transaction. Raises ``NodeGone`` or ``NodeLocked``,
    having written nothing.
    """
    connection = session.connection()
    # Read under the row lock the update takes anyway, so the takeover note names
    # the real holder and the node needs no second read.
    row = connection.execute(_READ, {"b_id": node_id}).one_or_none()
    if row is None:
        raise NodeGone(str(node_id))
    result = connection.execute(
        _TAKE,
        {"b_id": node_id, "b_host": ctx.hostname, "b_cutoff": live_cutoff(ctx.db, ctx.dead_after)},
    )
    if result.rowcount != 1:
        raise NodeLocked(row.uuid, row.reservation)
    values = dict(row._mapping)
    values.update(reservation=ctx.hostname, epoch=row.epoch + 1, conductor_affinity=ctx.hostname)
    previous = row.reservation
    if previous is not None and previous != ctx.hostname:
        # Only a dead conductor's reservation can be taken; without this note the
        # history would show the flow jump from one conductor to another unexplained.
        history.record(
            session,
            node_id,
            "takeover",
            f"conductor {ctx.hostname} took the node over from conductor {previous}, "
            "which stopped heartbeating or went offline",
            severity=history.WARNING,
            conductor=ctx.hostname,
            state=row.provision_state,
            target=row.target_provision_state,
        )
        count_on_commit(session, counted(TAKEOVERS, (row.conductor_group or "",)))
    return values


_RETAKE = update(_NODES).where(HELD_BY_TASK).values(epoch=_NODES.c.epoch + 1)


def retake(ctx: ConductorContext, session: Session, node_id: int, epoch: int) -> dict[str, Any]:
    """Take again, at a new epoch, a reservation this conductor holds at ``epoch``.

    Whatever still runs under the old epoch (a call abandoned at its
    deadline) can write nothing more. ``LockLost`` when the node is no longer
    held at ``epoch`` (the call released it first, or another conductor took
    it over); ``NodeGone`` when it was deleted.
    """
    connection = session.connection()
    row = connection.execute(_READ, {"b_id": node_id}).one_or_none()
    if row is None:
        raise NodeGone(str(node_id))
    params = {"b_id": node_id, "b_host": ctx.hostname, "b_epoch": epoch}
    if connection.execute(_RETAKE, params).rowcount != 1:
        raise LockLost(f"node {row.uuid} is no longer held at epoch {epoch}")
    values = dict(row._mapping)
    values["epoch"] = row.epoch + 1
    return values


@contextmanager
def acquire(
    ctx: ConductorContext,
    node_id: int,
    purpose: str,
    *,
    locked: Mapping[str, Any] | None = None,
) -> Iterator[NodeTask]:
    """Hold node ``node_id`` under this conductor's reservation for ``purpose``.

    ``locked`` is what ``lock`` returned in a transaction that has committed
    (the dispatcher locks nodes while claiming their work).
    """
    if locked is None:
        locked = _lock_now(ctx, node_id)
    try:
        columns = dict(locked)
        progress = flow_progress.from_joined(columns)
        task = NodeTask(ctx, node_from_row(columns), purpose, progress)
    except Exception:  # re-raised: whatever failed, the node is given back
        # The reservation is taken but no task holds it yet: a stored value this
        # code cannot read must not keep the node reserved by a live conductor.
        ctx.leaked_reservations.add((node_id, int(locked["epoch"])))
        drop_leaked_reservations(ctx)
        raise
    try:
        yield task
    except LockLost:
        raise
    except BaseException:  # re-raised: an interrupt too gives the node back
        task.clear_release_hooks()
        _release_quietly(task)
        raise
    try:
        task.release()
    except LockLost:
        raise
    except Exception:  # re-raised: any failure of the write, not only the database's
        # Writing what the work changed failed: give the node back without it.
        _give_back_bare(task)
        raise


def _lock_now(ctx: ConductorContext, node_id: int) -> dict[str, Any]:
    """``lock`` in a transaction of its own.

    A commit that fails may still have landed (the connection dropped after
    the server received it): the reservation it may have taken is owed back,
    fenced by its epoch, so that this live conductor does not hold the node
    with nothing running on it.
    """
    taken: dict[str, Any] | None = None
    try:
        with ctx.db.write() as session:
            taken = lock(ctx, session, node_id)
    except BaseException:  # re-raised: a reservation that may have been taken is owed
        if taken is not None:
            ctx.leaked_reservations.add((node_id, int(taken["epoch"])))
        raise
    return taken


def _release_quietly(task: NodeTask) -> None:
    """Release after a failure; if even that fails, give the reservation back bare.

    The release writes the task's unsaved changes, which may be what failed
    (a value the database refuses). The reservation must not outlive the
    failure whatever it was: this conductor stays alive, so nobody else
    would ever take the node.
    """
    try:
        task.release()
    except LockLost:
        pass
    except Exception:  # the reservation must not outlive any failure
        LOG.exception("node %s: releasing after a failure failed", task.node.uuid)
        _give_back_bare(task)


def _give_back_bare(task: NodeTask) -> None:
    task.ctx.leaked_reservations.add((task.node.id, task.epoch))
    drop_leaked_reservations(task.ctx)


_DROP = update(_NODES).where(HELD_BY_TASK).values(reservation=None)


def unlock(ctx: ConductorContext, session: Session, node_id: int, epoch: int) -> None:
    """Drop the reservation ``lock`` took at ``epoch``, changing nothing else on the node
    (nothing, if the node moved on since)."""
    session.connection().execute(_DROP, {"b_id": node_id, "b_host": ctx.hostname, "b_epoch": epoch})


_NOTE = (
    update(_NODES)
    .where(_NODES.c.id == bindparam("b_id"), _NODES.c.reservation.is_(None))
    .values(last_error=bindparam("b_error"))
)


def note_unheld_failure(session: Session, node_id: int, message: str) -> None:
    """Say on an unreserved node why work on it was given up, when no task could hold it.

    Only a node nobody holds is written (a holder's own outcome wins), and the
    history keeps the message whatever happened to ``last_error``.
    """
    session.connection().execute(_NOTE, {"b_id": node_id, "b_error": message})
    history.record(session, node_id, "conductor", message, severity=history.ERROR)


def drop_leaked_reservations(ctx: ConductorContext) -> int:
    """Give back reservations a failed release left; returns how many are still owed.

    Fenced by the epoch the task held, so a reservation taken since (by this
    conductor for other work) is left alone. Called again by the heartbeat
    while the database refuses.
    """
    for node_id, epoch in sorted(ctx.leaked_reservations):
        try:
            with ctx.db.write() as session:
                unlock(ctx, session, node_id, epoch)
        except SQLAlchemyError:
            LOG.exception("could not give back the reservation of node id %s yet", node_id)
            continue
        ctx.leaked_reservations.discard((node_id, epoch))
    return len(ctx.leaked_reservations)
