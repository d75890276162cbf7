"""The durable work-item queue.

Producers call ``enqueue`` inside the transaction that records the intent,
so the request exists exactly when the intent does. Workers ``claim`` items
with a lease (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite serialises
writers anyway), renew the lease while they run, and ``finish`` or ``retry``
them. An item whose lease expired (its worker died) is claimed again, so
handlers must be idempotent: at-least-once delivery.

An item that keeps failing is not retried for ever: each claim of an item
whose worker died holding it, and each retry after an unexpected error,
counts one failure; past the conductor's limit the item is dead-lettered
(``dead``, with its reason), kept for the operator to list and replay. An
item whose payload cannot be read is dead-lettered when claimed, on its own:
it never stops the rest of the batch.
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
    Text,
    bindparam,
    case,
    delete,
    false,
    func,
    insert,
    or_,
    select,
    true,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from metalforge.db.engine import UnreadableJson, decode_json, now_for
from metalforge.db.models import Node, UTCDateTime, WorkItem

PENDING = "pending"
CLAIMED = "claimed"
DONE = "done"
FAILED = "failed"
DEAD = "dead"
"""Given up on: kept with its reason until an operator replays or deletes it."""

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
    failures: int = 0
    """Claims that ended with the worker dead or an unexpected error, this one excluded."""
    unreadable: str | None = None
    """Why the payload could not be read (the item can only be dead-lettered)."""


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
    now = now_for(session)
    values = {
        "kind": kind,
        "node_id": node_id,
        "payload": payload or {},
        "state": PENDING,
        "attempts": 0,
        "failures": 0,
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


STALE_LEASES = 5
"""Leases a live conductor may fail to renew before its item is taken by another."""


@functools.cache
def _claim_query(with_live: bool, with_kinds: bool) -> Select[Any]:
    # Built once per shape: the dispatcher claims after every finished item,
    # and building this statement cost more than running it.
    c = _ITEMS.c
    now = bindparam("b_now", type_=UTCDateTime())
    owner = bindparam("b_owner", type_=String())
    live = bindparam("b_live", expanding=True, type_=String())
    expired = (c.state == CLAIMED) & (c.lease_owner != owner) & (c.lease_expires_at < now)
    due = or_(
        (c.state == PENDING) & (c.not_before <= now),
        # An expired lease of a live conductor is its item still running: a database
        # outage longer than a lease stopped its renewals, not its worker. Taken only
        # once it is long stale (a conductor that lost track of it).
        expired & (c.lease_expires_at < bindparam("b_stale", type_=UTCDateTime()))
        if with_live
        else expired,
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
    # The payload is read as text and decoded item by item: one that cannot be
    # decoded must not fail the whole batch.
    query = (
        select(
            c.id,
            c.kind,
            c.node_id,
            sql_cast(c.payload, Text).label("payload_text"),
            c.attempts,
            c.failures,
            (c.state == CLAIMED).label("abandoned"),
        )
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
        # A claimed item claimed again: its worker died (or its conductor did).
        failures=_ITEMS.c.failures + case((_ITEMS.c.state == CLAIMED, 1), else_=0),
        rerun=False,
    )
)


def _claimed(row: Any) -> ClaimedItem:
    failures = row.failures + (1 if row.abandoned else 0)
    try:
        payload = decode_json(row.payload_text)
        if not isinstance(payload, dict):
            raise UnreadableJson(f"a payload must be an object, not {type(payload).__name__}")
    except UnreadableJson as exc:
        return ClaimedItem(row.id, row.kind, row.node_id, {}, row.attempts + 1, failures, str(exc))
    return ClaimedItem(row.id, row.kind, row.node_id, payload, row.attempts + 1, failures)


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
    Items held by a conductor missing from ``live_owners`` are claimed again: a
    dead conductor's heartbeat stops renewing its leases but they would only
    expire ``lease`` later, while its node reservations may be taken as soon
    as it is known dead. A live conductor's item whose lease expired is still
    running (its renewals failed while the database was away): it is taken
    only when the lease is ``STALE_LEASES`` leases old, or when no one is
    known live. ``owner``'s own items are never reclaimed here: they are
    still running in its workers.
    """
    now = now_for(session)
    params: dict[str, Any] = {
        "b_now": now,
        "b_owner": owner,
        "b_stale": now - lease * STALE_LEASES,
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
    return [_claimed(row) for row in rows]


def renew(session: Session, owner: str, lease: dt.timedelta, item_ids: Iterable[int]) -> int:
    """Extend the lease of the items ``owner`` is running; returns how many.

    Only the items a worker is running: an item its worker let go of without
    finishing (a bug outside any step) must expire and be claimed again
    instead of being held for ever by a conductor that is alive.
    """
    ids = list(item_ids)
    if not ids:
        return 0
    result = session.execute(
        update(WorkItem)
        .where(WorkItem.state == CLAIMED, WorkItem.lease_owner == owner, WorkItem.id.in_(ids))
        .values(lease_expires_at=now_for(session) + lease)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def finish(session: Session, item_id: int, owner: str, *, error: str | None = None) -> bool:
    """Mark an item done (or failed with ``error``) if ``owner`` still holds it."""
    now = now_for(session)
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
                # A new request: it starts with a fresh failure budget.
                "failures": 0,
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


def retry(
    session: Session,
    item_id: int,
    owner: str,
    delay: float,
    *,
    count: bool = True,
    failure: str | None = None,
) -> bool:
    """Give an item back to the queue, due in ``delay`` seconds.

    ``count=False``: the attempt did not really happen (the node was locked).
    ``failure``: the attempt failed unexpectedly; it counts towards dead-lettering.
    """
    values: dict[str, Any] = {
        "state": PENDING,
        "lease_owner": None,
        "lease_expires_at": None,
        "not_before": now_for(session) + dt.timedelta(seconds=delay),
    }
    if not count:
        values["attempts"] = _ITEMS.c.attempts - 1
    if failure is not None:
        values["failures"] = _ITEMS.c.failures + 1
        values["last_error"] = failure
    result = session.connection().execute(
        update(_ITEMS)
        .where(_ITEMS.c.id == item_id, _ITEMS.c.state == CLAIMED, _ITEMS.c.lease_owner == owner)
        .values(**values)
    )
    return result.rowcount == 1


def bury(session: Session, item_id: int, owner: str, reason: str) -> bool:
    """Dead-letter an item ``owner`` holds: it is kept with ``reason`` and never claimed."""
    result = session.connection().execute(
        _UPDATE_HELD,
        {
            "b_id": item_id,
            "b_owner": owner,
            "state": DEAD,
            "last_error": reason,
            "dedupe_key": None,
            "lease_owner": None,
            "lease_expires_at": None,
            "finished_at": now_for(session),
        },
    )
    return result.rowcount == 1


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A work item as the operator sees it."""

    id: int
    kind: str
    node_uuid: str | None
    state: str
    attempts: int
    failures: int
    lease_owner: str | None
    reason: str | None
    """The last failure (``dead``: why it was given up on)."""
    created_at: dt.datetime
    finished_at: dt.datetime | None


def entries(session: Session, *, dead: bool) -> list[QueueEntry]:
    """Dead-lettered items, or else the unfinished ones (pending and claimed); oldest first."""
    c = _ITEMS.c
    nodes = cast(Table, Node.__table__)
    wanted = [DEAD] if dead else [PENDING, CLAIMED]
    rows = session.connection().execute(
        select(
            c.id,
            c.kind,
            nodes.c.uuid.label("node_uuid"),
            c.state,
            c.attempts,
            c.failures,
            c.lease_owner,
            c.last_error.label("reason"),
            c.created_at,
            c.finished_at,
        )
        .select_from(_ITEMS.outerjoin(nodes, nodes.c.id == c.node_id))
        .where(c.state.in_(wanted))
        .order_by(c.id)
    )
    return [QueueEntry(**row._mapping) for row in rows]


def replay(session: Session, item_id: int) -> bool:
    """Queue a dead-lettered item again, with a fresh failure budget (and no old reason).

    It gets no dedupe key back: handlers are level-triggered, so running it
    beside a newer item for the same node does no harm.
    """
    result = session.connection().execute(
        update(_ITEMS)
        .where(_ITEMS.c.id == item_id, _ITEMS.c.state == DEAD)
        .values(
            state=PENDING,
            attempts=0,
            failures=0,
            last_error=None,
            not_before=now_for(session),
            finished_at=None,
        )
    )
    return result.rowcount == 1


AGENT_IDLE = "agent_idle"
"""Power off a node whose kept agent (fast track) stayed idle too long: queued, due at
its deadline, when a flow keeps the agent (``conductor.kept_agents`` runs it)."""
PROVISION = "provision"
"""The kind of item that continues a node's provision flow (level-triggered: no payload)."""
PROVISION_KEY_PREFIX = "provision:"
"""At most one unfinished provision item per node: its dedupe key is this and the node id."""


def provision_key(node_id: int) -> str:
    return f"{PROVISION_KEY_PREFIX}{node_id}"


def enqueue_provision(
    session: Session,
    node_id: int,
    *,
    preferred_owner: str | None = None,
    not_before: dt.datetime | None = None,
) -> None:
    """Queue (once per node) a look at the node's flow, in the caller's transaction."""
    enqueue(
        session,
        PROVISION,
        node_id,
        preferred_owner=preferred_owner,
        dedupe_key=provision_key(node_id),
        not_before=not_before,
    )


def has_pending(session: Session, dedupe_key: str) -> bool:
    """Whether an unfinished item carries ``dedupe_key``."""
    return session.scalar(select(WorkItem.id).where(WorkItem.dedupe_key == dedupe_key)) is not None


def purge_finished(session: Session, older_than: dt.timedelta) -> int:
    """Delete finished items older than ``older_than``; the history keeps what matters."""
    result = session.execute(
        delete(WorkItem).where(
            WorkItem.state.in_([DONE, FAILED]), WorkItem.finished_at < now_for(session) - older_than
        )
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
