"""Running an allocation's work: claim it, reserve a matching node, activate or fail it.

Which nodes match is ``allocation_candidates``; how the conductor's service
schedules this work (its kind, states, resume and adoption) is declared in
``flows.allocation``. This module is what those declarations call.

An allocation is processed by whichever conductor holds its work item (kind
``allocation``, de-duplicated per allocation). Correctness does not depend on
the queue, though: the one write that makes an allocation ``active`` also
writes the node (``instance_uuid``, ``allocation_id``, ``instance_info.traits``)
under the node's reservation and is conditional on the allocation still being
``allocating`` *and* still belonging to this conductor (``conductor_affinity``).
A conductor that lost the allocation -- it stalled, was declared dead, and
another adopted it -- rolls that write back and moves on, so a node can never
end up in two allocations, and an allocation never holds two nodes.

Everything else is level-triggered and safe to repeat: processing reads the
allocation's state first and stops if it is no longer ``allocating``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import String, Table, and_, delete, exists, literal, select, update
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge.conductor.allocation_candidates import (
    Request,
    allocatable,
    candidates,
    node_matches,
    request_of,
)
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.reservations import acquire
from metalforge.conductor.task import LockLost, NodeGone
from metalforge.coordination.membership import dead_conductors
from metalforge.db import queue
from metalforge.db.models import Allocation, AllocationTrait, NodeTrait, WorkItem, utcnow
from metalforge.db.tallies import count_on_commit, counted, observed
from metalforge.errors import NodeLocked
from metalforge.tallies import ALLOCATION_DURATION, ALLOCATIONS_FINISHED

ALLOCATING = "allocating"
ACTIVE = "active"
ERROR = "error"
KIND = "allocation"

STEAL_AFTER = 3
"""Attempts after which the holder of the work item takes the allocation from a live
conductor: that conductor is then not processing it (or has stalled), and the
conditional final write keeps a late finish by it harmless."""
LOCKED_ROUNDS = 50
"""Passes over the candidates while every one of them is locked by someone else."""
LOCKED_PAUSE = 0.1

_ALLOCATIONS = cast(Table, Allocation.__table__)


class AllocationLost(RuntimeError):
    """The allocation was deleted, finished or adopted by another conductor meanwhile."""


def dedupe_key(allocation_id: int) -> str:
    return f"{KIND}:{allocation_id}"


def enqueue(session: Session, allocation_id: int, preferred_owner: str | None = None) -> None:
    """Queue the processing of an allocation in the caller's transaction."""
    queue.enqueue(
        session,
        KIND,
        None,
        {"allocation_id": allocation_id},
        preferred_owner=preferred_owner,
        dedupe_key=dedupe_key(allocation_id),
    )


# -- processing -----------------------------------------------------------------


def _mine(ctx: ConductorContext) -> Any:
    return and_(
        _ALLOCATIONS.c.state == ALLOCATING,
        _ALLOCATIONS.c.conductor_affinity == ctx.hostname,
    )


def _claim(ctx: ConductorContext, allocation_id: int, attempts: int) -> Request | bool | None:
    """Make the allocation this conductor's; its request, ``None`` when done, ``False`` to wait."""
    with ctx.db.write() as session:
        allocation = session.get(Allocation, allocation_id)
        if allocation is None or allocation.state != ALLOCATING:
            return None
        holder = allocation.conductor_affinity
        if holder != ctx.hostname:
            dead = set(session.scalars(dead_conductors(ctx.db, ctx.dead_after)))
            if holder is not None and holder not in dead and attempts <= STEAL_AFTER:
                return False
            where = (
                _ALLOCATIONS.c.conductor_affinity.is_(None)
                if holder is None
                else _ALLOCATIONS.c.conductor_affinity == holder
            )
            result = session.connection().execute(
                update(_ALLOCATIONS)
                .where(_ALLOCATIONS.c.id == allocation_id, _ALLOCATIONS.c.state == ALLOCATING)
                .where(where)
                .values(conductor_affinity=ctx.hostname, updated_at=utcnow())
            )
            if result.rowcount != 1:
                return False
        return request_of(allocation)


def process(ctx: ConductorContext, allocation_id: int, attempts: int = 1) -> bool:
    """Process one allocation; ``False`` asks for the work item to be retried shortly."""
    req = _claim(ctx, allocation_id, attempts)
    if req is None:
        return True
    if req is False:
        return False
    assert isinstance(req, Request)
    locked = 0
    for _round in range(LOCKED_ROUNDS):
        with ctx.db.read() as session:
            ids, reason = candidates(session, req)
        if not ids:
            fail(ctx, req, reason or "no candidate nodes")
            return True
        locked = 0
        for node_id in ids:
            outcome = _try_node(ctx, req, node_id)
            if outcome in ("allocated", "lost"):
                return True
            if outcome == "locked":
                locked += 1
        if locked == 0:
            continue  # every candidate was taken meanwhile: look again
        if ctx.stopping.wait(LOCKED_PAUSE):
            return False
    fail(ctx, req, f"all {locked} matching nodes stayed locked by other operations")
    return True


def _try_node(ctx: ConductorContext, req: Request, node_id: int) -> str:
    """Reserve ``node_id`` for ``req``: allocated, lost, locked or unsuitable."""
    try:
        with acquire(ctx, node_id, "allocation") as task:
            node = task.node
            with ctx.db.read() as session:
                traits = set(
                    session.scalars(select(NodeTrait.trait).where(NodeTrait.node_id == node_id))
                )
            if not allocatable(node) or node_matches(node, req, traits) is not None:
                return "unsuitable"
            before = (node.instance_uuid, node.allocation_id, node.instance_info)
            info = dict(node.instance_info)
            info["traits"] = list(req.traits)
            node.instance_uuid = req.uuid
            node.allocation_id = req.id
            node.instance_info = info
            task.record("allocation", f"allocated to allocation {req.uuid}")
            task.on_release(lambda session: _activate(session, ctx, req, node_id))
            try:
                task.release()
            except (AllocationLost, IntegrityError):
                # Rolled back: the node is as it was; let the block release it unchanged.
                task.clear_release_hooks()
                node.instance_uuid, node.allocation_id, node.instance_info = before
                return "lost"
            return "allocated"
    except NodeLocked:
        return "locked"
    except (NodeGone, LockLost):
        return "unsuitable"


def _activate(session: Session, ctx: ConductorContext, req: Request, node_id: int) -> None:
    result = session.connection().execute(
        update(_ALLOCATIONS)
        .where(_ALLOCATIONS.c.id == req.id, _mine(ctx))
        .values(node_id=node_id, state=ACTIVE, last_error=None, updated_at=utcnow())
        .returning(_ALLOCATIONS.c.created_at)
    )
    created = result.scalar_one_or_none()
    if created is None:
        raise AllocationLost(req.uuid)
    _count_result(session, ACTIVE, created)


def _count_result(session: Session, result: str, created: dt.datetime | None) -> None:
    """Count an allocation that ended, and how long it took, once the write commits."""
    count_on_commit(session, counted(ALLOCATIONS_FINISHED, (result,)))
    if created is not None:
        took = max(0.0, (utcnow() - created).total_seconds())
        count_on_commit(session, observed(ALLOCATION_DURATION, (result,), took))


def fail(ctx: ConductorContext, req: Request, reason: str) -> None:
    """Put the allocation in ``error`` (if it is still this conductor's)."""
    with ctx.db.write() as session:
        for created in session.connection().scalars(
            update(_ALLOCATIONS)
            .where(_ALLOCATIONS.c.id == req.id, _mine(ctx))
            .values(
                state=ERROR,
                last_error=f"Failed to process allocation {req.uuid}: {reason}.",
                updated_at=utcnow(),
            )
            .returning(_ALLOCATIONS.c.created_at)
        ):
            _count_result(session, ERROR, created)


def give_up(ctx: ConductorContext, allocation_id: int, reason: str) -> None:
    """Put an allocation still ``allocating`` in ``error``: its request was given up on.

    Whoever holds it: the work item was dead-lettered, so nobody is processing
    it, and left ``allocating`` it would be queued again for ever.
    """
    with ctx.db.write() as session:
        result = session.connection().execute(
            update(_ALLOCATIONS)
            .where(_ALLOCATIONS.c.id == allocation_id, _ALLOCATIONS.c.state == ALLOCATING)
            .values(
                state=ERROR,
                last_error=f"Failed to process allocation: {reason}.",
                conductor_affinity=None,
                updated_at=utcnow(),
            )
            .returning(_ALLOCATIONS.c.created_at)
        )
        for created in result.scalars():
            _count_result(session, ERROR, created)


def let_go(ctx: ConductorContext, allocation_id: int) -> None:
    """Drop this conductor's claim on an allocation it could not finish, for anyone to take."""
    with ctx.db.write() as session:
        session.connection().execute(
            update(_ALLOCATIONS)
            .where(_ALLOCATIONS.c.id == allocation_id, _mine(ctx))
            .values(conductor_affinity=None)
        )


# -- takeover -------------------------------------------------------------------


def _unqueued() -> Any:
    return ~exists().where(
        WorkItem.dedupe_key == literal(f"{KIND}:") + sql_cast(Allocation.id, String)
    )


def resume_own(ctx: ConductorContext) -> int:
    """At start-up: queue this conductor's unfinished allocations that have no work item."""
    with ctx.db.write() as session:
        ids = list(
            session.scalars(
                select(Allocation.id).where(
                    Allocation.state == ALLOCATING,
                    Allocation.conductor_affinity == ctx.hostname,
                    _unqueued(),
                )
            )
        )
        for allocation_id in ids:
            enqueue(session, allocation_id, ctx.hostname)
    return len(ids)


def adopt_orphans(ctx: ConductorContext) -> int:
    """Adopt the unfinished allocations of dead conductors; returns how many.

    Each adoption is an ``UPDATE ... WHERE conductor_affinity = <dead host>``
    whose row count says whether this conductor won it: two conductors
    adopting at once never both get one.
    """
    adopted = 0
    with ctx.db.write() as session:
        rows = session.execute(
            select(Allocation.id, Allocation.conductor_affinity).where(
                Allocation.state == ALLOCATING,
                Allocation.conductor_affinity.in_(dead_conductors(ctx.db, ctx.dead_after)),
            )
        ).all()
        for allocation_id, holder in rows:
            result = session.connection().execute(
                update(_ALLOCATIONS)
                .where(
                    _ALLOCATIONS.c.id == allocation_id,
                    _ALLOCATIONS.c.state == ALLOCATING,
                    _ALLOCATIONS.c.conductor_affinity == holder,
                )
                .values(conductor_affinity=ctx.hostname, updated_at=utcnow())
            )
            if result.rowcount == 1:
                enqueue(session, allocation_id, ctx.hostname)
                adopted += 1
    if adopted:
        ctx.waker.notify()
    return adopted


def delete_allocation(session: Session, allocation_id: int) -> None:
    """Delete an allocation and its traits; the caller clears the node in this transaction."""
    session.execute(delete(AllocationTrait).where(AllocationTrait.allocation_id == allocation_id))
    session.execute(_ALLOCATIONS.delete().where(_ALLOCATIONS.c.id == allocation_id))
