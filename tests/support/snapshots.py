"""Every table's rows, kept and put back: a fresh database for each case at the cost of
one delete and one insert per table.

For tests that send many requests, each of which must find the same world
(the fuzzer's examples, the authorization table's personas): rebuilding
that world through the API for each one cost more than the requests
themselves. Only for stacks whose conductor is not running, so that nothing
writes behind the test's back between a restore and its request.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, delete, insert, select

from metalforge.db.engine import Database
from metalforge.db.models import Base

Snapshot = list[tuple[Table, list[dict[str, Any]]]]

APPEND_ONLY = frozenset({"node_events"})
"""Written by the database's own triggers as nodes come and go; left to them."""


def snapshot(db: Database) -> Snapshot:
    """Every table's rows as they are now, parents before children."""
    with db.read() as session:
        return [
            (table, [dict(row._mapping) for row in session.execute(select(table))])
            for table in Base.metadata.sorted_tables
            if table.name not in APPEND_ONLY
        ]


def restore(db: Database, saved: Snapshot) -> None:
    """Put every table back as ``saved`` holds it: what was written since is gone."""
    with db.write() as session:
        for table, _ in reversed(saved):
            session.execute(delete(table))
        for table, rows in saved:
            if rows:
                session.execute(insert(table), rows)
