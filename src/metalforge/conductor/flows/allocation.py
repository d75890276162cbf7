"""Allocation matching, declared: the allocation's states, its work and its takeover.

Not a node flow: an allocation has states of its own and holds no node's
reservation while it looks (it takes each candidate's in turn: the work is
``conductor.allocation_work``, the matching ``conductor.allocation_candidates``).
So this module only declares it, as work a conductor runs without a node
(``spec.DetachedFlow``): what runs a work item of its kind, what undoes this
conductor's claim when a run breaks, what a given-up item leaves, what a
conductor resumes at start-up and what it adopts from dead conductors, every
how many seconds. The conductor's service runs any such flow the same way;
nothing there names allocations.
"""

from __future__ import annotations

from types import MappingProxyType

from metalforge.conductor import allocation_work
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.flows.spec import DetachedFlow
from metalforge.db import queue


def _allocation_id(item: queue.ClaimedItem) -> int | None:
    """The allocation an item is for (none in a payload nobody wrote)."""
    value = item.payload.get("allocation_id")
    return value if isinstance(value, int) else None


def _run(ctx: ConductorContext, item: queue.ClaimedItem) -> bool | None:
    allocation_id = _allocation_id(item)
    if allocation_id is None:
        return None
    return allocation_work.process(ctx, allocation_id, item.attempts)


def _let_go(ctx: ConductorContext, item: queue.ClaimedItem) -> None:
    allocation_id = _allocation_id(item)
    if allocation_id is not None:
        allocation_work.let_go(ctx, allocation_id)


def _give_up(ctx: ConductorContext, item: queue.ClaimedItem, reason: str) -> None:
    allocation_id = _allocation_id(item)
    if allocation_id is not None:
        allocation_work.give_up(ctx, allocation_id, reason)


SPEC = DetachedFlow(
    name="allocation",
    work_kind=allocation_work.KIND,
    states=MappingProxyType(
        {
            allocation_work.ALLOCATING: "busy",
            allocation_work.ACTIVE: "stable",
            allocation_work.ERROR: "failure",
        }
    ),
    run=_run,
    let_go=_let_go,
    give_up=_give_up,
    resume=allocation_work.resume_own,
    adopt=allocation_work.adopt_orphans,
    adopt_interval_setting="allocation_takeover_interval",
)
