"""The durable work-item queue.

Producers call ``enqueue`` inside the transaction that records the intent,
so the request exists exactly when the intent does. Workers ``claim`` items
with a lease (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite serialises
writers anyway), renew the lease while they run, and ``finish`` or ``retry``
them. An item whose lease expired (its worker died) is claimed again, so
handlers must be idempotent: at-least-once delivery.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, false, func, or_, select, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from metalforge.db.models import WorkItem, utcnow

PENDING = "pending"
CLAIMED = "claimed"
DONE = "done"
FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ClaimedItem:
    """What a worker needs to run an item, detached from any session."""

    id: int
    kind: str
    node_id: int | None
    payload: dict[str, Any]
    attempts: int


def enqueue(
    session: Session,
    kind: str,
    node_id: int | None,
    payload: dict[str, Any] | None = None,
    *,
    preferred_owner: str | None = None,
    dedupe_key: str | None = None,
    not_before: dt.datetime | None = None,
) -> None:
    """Queue work in the caller's transaction.

    With a ``dedupe_key``, an unfinished item with the same key absorbs this
    one: its ``not_before`` moves earlier if this one is due sooner. Handlers
    are level-triggered, so one pending item per key is enough.
    """
    when = not_before or utcnow()
    values = {
        "kind": kind,
        "node_id": node_id,
        "payload": payload or {},
        "state": PENDING,
        "attempts": 0,
        "preferred_owner": preferred_owner,
        "dedupe_key": dedupe_key,
        "not_before": when,
        "created_at": utcnow(),
    }
    if dedupe_key is None:
        session.add(WorkItem(**values))
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(WorkItem).values(**values)
    earliest = func.least if dialect == "postgresql" else func.min
    stmt = stmt.on_conflict_do_update(
        index_elements=[WorkItem.dedupe_key],
        set_={"not_before": earliest(WorkItem.not_before, stmt.excluded.not_before), "rerun": True},
    )
    session.execute(stmt)


def claim(
    session: Session,
    owner: str,
    *,
    limit: int,
    lease: dt.timedelta,
    live_owners: Sequence[str],
    affinity_grace: dt.timedelta,
    kinds: Iterable[str] | None = None,
) -> list[ClaimedItem]:
    """Claim up to ``limit`` due items for ``owner``.

    An item prefers the conductor the hash ring chose; others take it only
    when that conductor is not alive or the item has waited ``affinity_grace``.
    Items whose lease expired are claimed again, and so are items held by a
    conductor missing from ``live_owners``: a dead conductor's heartbeat stops
    renewing its leases but they would only expire ``lease`` later, while its
    node reservations may be taken as soon as it is known dead. ``owner``'s
    own items are never reclaimed here: they are still running in its workers.
    """
    now = utcnow()
    due = or_(
        (WorkItem.state == PENDING) & (WorkItem.not_before <= now),
        (WorkItem.state == CLAIMED) & (WorkItem.lease_expires_at < now),
        (WorkItem.state == CLAIMED)
        & WorkItem.lease_owner.not_in(list(live_owners))
        & (WorkItem.lease_owner != owner)
        if live_owners
        else false(),
    )
    affinity = or_(
        WorkItem.preferred_owner.is_(None),
        WorkItem.preferred_owner == owner,
        WorkItem.preferred_owner.not_in(list(live_owners)) if live_owners else true(),
        WorkItem.not_before <= now - affinity_grace,
    )
    query = select(WorkItem).where(due, affinity).order_by(WorkItem.not_before, WorkItem.id)
    if kinds is not None:
        query = query.where(WorkItem.kind.in_(list(kinds)))
    query = query.limit(limit).with_for_update(skip_locked=True)
    items = list(session.scalars(query))
    claimed = []
    for item in items:
        item.state = CLAIMED
        item.lease_owner = owner
        item.lease_expires_at = now + lease
        item.attempts += 1
        item.rerun = False
        claimed.append(
            ClaimedItem(item.id, item.kind, item.node_id, dict(item.payload), item.attempts)
        )
    return claimed


def renew(session: Session, owner: str, lease: dt.timedelta) -> int:
    """Extend the lease of every item ``owner`` holds; returns how many."""
    result = session.execute(
        update(WorkItem)
        .where(WorkItem.state == CLAIMED, WorkItem.lease_owner == owner)
        .values(lease_expires_at=utcnow() + lease)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def finish(session: Session, item_id: int, owner: str, *, error: str | None = None) -> bool:
    """Mark an item done (or failed with ``error``) if ``owner`` still holds it."""
    now = utcnow()
    item = session.get(WorkItem, item_id)
    if item is None or item.state != CLAIMED or item.lease_owner != owner:
        return False
    if item.rerun and not error:
        # A duplicate request arrived while this ran: the handler may not have seen it.
        item.state = PENDING
        item.rerun = False
        item.lease_owner = None
        item.lease_expires_at = None
        item.not_before = now
        return True
    item.state = FAILED if error else DONE
    item.last_error = error
    item.dedupe_key = None
    item.finished_at = now
    item.duration = (now - item.created_at).total_seconds()
    return True


def retry(session: Session, item_id: int, owner: str, delay: float, *, count: bool = True) -> bool:
    """Give an item back to the queue, due in ``delay`` seconds."""
    item = session.get(WorkItem, item_id)
    if item is None or item.state != CLAIMED or item.lease_owner != owner:
        return False
    item.state = PENDING
    item.lease_owner = None
    item.lease_expires_at = None
    item.not_before = utcnow() + dt.timedelta(seconds=delay)
    if not count:
        item.attempts -= 1
    return True


def has_pending(session: Session, dedupe_key: str) -> bool:
    """Whether an unfinished item carries ``dedupe_key``."""
    return session.scalar(select(WorkItem.id).where(WorkItem.dedupe_key == dedupe_key)) is not None


def purge_finished(session: Session, older_than: dt.timedelta) -> int:
    """Delete finished items older than ``older_than``; the history keeps what matters."""
    result = session.execute(
        delete(WorkItem).where(
            WorkItem.state.in_([DONE, FAILED]), WorkItem.finished_at < utcnow() - older_than
        )
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
