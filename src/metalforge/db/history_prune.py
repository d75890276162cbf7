"""Dropping the oldest node history: each node keeps its newest entries, as Ironic's do.

A node's history gets an entry for every transition, step, error and
request; over years of a fleet's life the table would only grow. The
conductors' upkeep drops, for each node, what is beyond its newest
``conductor.history_max_entries`` entries (Ironic's ``node_history_max_entries``,
300) and older than ``history_minimum_days``, at most
``history_prune_batch`` rows a round, so one round's delete stays short.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Connection, delete, func, select

from metalforge.db.models import NodeHistory


def prune(connection: Connection, *, keep: int, before: dt.datetime, batch: int) -> int:
    """Drop up to ``batch`` entries beyond each node's newest ``keep`` and older than
    ``before``, oldest first; how many."""
    ranked = select(
        NodeHistory.id,
        NodeHistory.created_at,
        func.row_number()
        .over(partition_by=NodeHistory.node_id, order_by=NodeHistory.id.desc())
        .label("newness"),
    ).subquery()
    beyond = (
        select(ranked.c.id)
        .where(ranked.c.newness > keep, ranked.c.created_at < before)
        .order_by(ranked.c.id)
        .limit(batch)
    )
    ids = list(connection.scalars(beyond))
    if not ids:
        return 0
    return connection.execute(delete(NodeHistory).where(NodeHistory.id.in_(ids))).rowcount
