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
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    Integer,
    Select,
    String,
    Table,
    bindparam,
    delete,
    false,
    func,
    insert,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from metalforge.db.models import UTCDateTime, WorkItem, utcnow

PENDING = "pending"
CLAIMED = "claimed"
DONE = "done"
FAILED = "failed"

# Statements built once: the queue is on the path of every provision step, and
# building a statement costs more than SQLite takes to run it.
_ITEMS = cast(Table, WorkItem.__table__)
_INSERT = insert(_ITEMS)


def _upsert(dialect_insert: Any, earliest: Any) -> Any:
    stmt = dialect_insert(_ITEMS)
    return stmt.on_conflict_do_update(
        index_elements=[_ITEMS.c.dedupe_key],
        set_={"not_before": earliest(_ITEMS.c.not_before, stmt.excluded.not_before), "rerun": True},
    )


_UPSERT = {
    "postgresql": _upsert(postgresql.insert, func.least),
    "sqlite": _upsert(sqlite.insert, func.min),
}
_HELD = (_ITEMS.c.state == CLAIMED) & (_ITEMS.c.lease_owner == bindparam("b_owner"))
_READ_HELD = (
    select(_ITEMS.c.rerun, _ITEMS.c.created_at)
    .where(_ITEMS.c.id == bindparam("b_id"), _HELD)
    .with_for_update()
)
_UPDATE_HELD = update(_ITEMS).where(_ITEMS.c.id == bindparam("b_id"), _HELD)


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
    now = utcnow()
    values = {
        "kind": kind,
        "node_id": node_id,
        "payload": payload or {},
        "state": PENDING,
        "attempts": 0,
        "rerun": False,
        "preferred_owner": preferred_owner,
        "dedupe_key": dedupe_key,
        "not_before": not_before or now,
        "created_at": now,
    }
    connection = session.connection()
    if dedupe_key is None:
        connection.execute(_INSERT, values)
        return
    connection.execute(_UPSERT[connection.dialect.name], values)


@functools.cache
def _claim_query(with_live: bool, with_kinds: bool) -> Select[Any]:
    # Built once per shape: the dispatcher claims after every finished item,
    # and building this statement cost more than running it.
    c = _ITEMS.c
    now = bindparam("b_now", type_=UTCDateTime())
    owner = bindparam("b_owner", type_=String())
    live = bindparam("b_live", expanding=True, type_=String())
    due = or_(
        (c.state == PENDING) & (c.not_before <= now),
        (c.state == CLAIMED) & (c.lease_expires_at < now),
        (c.state == CLAIMED) & c.lease_owner.not_in(live) & (c.lease_owner != owner)
        if with_live
        else false(),
    )
    affinity = or_(
        c.preferred_owner.is_(None),
        c.preferred_owner == owner,
        c.preferred_owner.not_in(live) if with_live else true(),
        c.not_before <= bindparam("b_grace", type_=UTCDateTime()),
    )
    query = (
        select(c.id, c.kind, c.node_id, c.payload, c.attempts)
        .where(due, affinity)
        .order_by(c.not_before, c.id)
    )
    if with_kinds:
        query = query.where(c.kind.in_(bindparam("b_kinds", expanding=True, type_=String())))
    return query.limit(bindparam("b_limit", type_=Integer())).with_for_update(skip_locked=True)


_CLAIM = (
    update(_ITEMS)
    .where(_ITEMS.c.id.in_(bindparam("b_ids", expanding=True)))
    .values(
        state=CLAIMED,
        lease_owner=bindparam("b_owner", type_=String()),
        lease_expires_at=bindparam("b_until", type_=UTCDateTime()),
        attempts=_ITEMS.c.attempts + 1,
        rerun=False,
    )
)


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
    params: dict[str, Any] = {
        "b_now": now,
        "b_owner": owner,
        "b_grace": now - affinity_grace,
        "b_limit": limit,
        "b_until": now + lease,
    }
    if live_owners:
        params["b_live"] = list(live_owners)
    if kinds is not None:
        params["b_kinds"] = list(kinds)
    connection = session.connection()
    rows = connection.execute(_claim_query(bool(live_owners), kinds is not None), params).all()
    if not rows:
        return []
    connection.execute(_CLAIM, {**params, "b_ids": [row.id for row in rows]})
    return [
        ClaimedItem(row.id, row.kind, row.node_id, dict(row.payload), row.attempts + 1)
        for row in rows
    ]


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
    connection = session.connection()
    # Read under a row lock (PostgreSQL), so a duplicate arriving now waits and
    # its ``rerun`` flag is not lost.
    held = {"b_id": item_id, "b_owner": owner}
    row = connection.execute(_READ_HELD, held).one_or_none()
    if row is None:
        return False
    if row.rerun and not error:
        # A duplicate request arrived while this ran: the handler may not have seen it.
        connection.execute(
            _UPDATE_HELD,
            {
                **held,
                "state": PENDING,
                "rerun": False,
                "lease_owner": None,
                "lease_expires_at": None,
                "not_before": now,
            },
        )
        return True
    connection.execute(
        _UPDATE_HELD,
        {
            **held,
            "state": FAILED if error else DONE,
            "last_error": error,
            "dedupe_key": None,
            "finished_at": now,
            "duration": (now - row.created_at).total_seconds(),
        },
    )
    return True


def retry(session: Session, item_id: int, owner: str, delay: float, *, count: bool = True) -> bool:
    """Give an item back to the queue, due in ``delay`` seconds."""
    values: dict[str, Any] = {
        "state": PENDING,
        "lease_owner": None,
        "lease_expires_at": None,
        "not_before": utcnow() + dt.timedelta(seconds=delay),
    }
    if not count:
        values["attempts"] = _ITEMS.c.attempts - 1
    result = session.connection().execute(
        update(_ITEMS)
        .where(_ITEMS.c.id == item_id, _ITEMS.c.state == CLAIMED, _ITEMS.c.lease_owner == owner)
        .values(**values)
    )
    return result.rowcount == 1


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
