"""Adding each process's counts (``metalforge.tallies``) to the cluster's totals.

A flush is one write transaction that adds every delta counted since the
last one to its ``metric_totals`` row (an upsert, in a fixed order so two
processes flushing at once never deadlock). A process flushes every
``FLUSH_EVERY`` seconds while it counts, when it serves a scrape (so the
answering process's own counts are never stale) and when its ``Database``
is disposed; a crash loses at most one interval of counts. Counts tied to a
transaction (a flow that started) are taken only when it commits
(``count_on_commit``), so a rolled-back write is never counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy import Connection, Executable, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from metalforge.db.models import MetricTotal
from metalforge.tallies import Key, Metric, Tally

LOG = logging.getLogger(__name__)

FLUSH_EVERY = 10.0
"""Seconds between two flushes of a process that counts."""

PENDING = "metalforge.tally"
"""``Session.info`` key: counts waiting for their transaction to commit."""

Count = Callable[[Tally], None]


def count_on_commit(session: Session, count: Count) -> None:
    """Apply ``count`` to the process's tally once ``session``'s transaction commits."""
    session.info.setdefault(PENDING, []).append(count)


def counted(metric: Metric, labels: tuple[str, ...], by: float = 1.0) -> Count:
    return lambda tally: tally.count(metric, labels, by)


def observed(metric: Metric, labels: tuple[str, ...], value: float) -> Count:
    return lambda tally: tally.observe(metric, labels, value)


def take_pending(session: Session) -> list[Count]:
    counts: list[Count] = session.info.pop(PENDING, [])
    return counts


def store(connection: Connection, deltas: dict[Key, float]) -> None:
    """Add ``deltas`` to their rows, creating missing ones, in key order."""
    if not deltas:
        return
    statement = _upsert(connection.dialect.name)
    connection.execute(
        statement,
        [
            {"name": name, "labels": labels, "part": part, "value": value}
            for (name, labels, part), value in sorted(deltas.items())
        ],
    )


def totals(connection: Connection) -> list[tuple[str, str, str, float]]:
    """Every stored total: ``(name, joined labels, part, value)``."""
    rows = connection.execute(
        select(MetricTotal.name, MetricTotal.labels, MetricTotal.part, MetricTotal.value)
    ).all()
    return [(row[0], row[1], row[2], float(row[3])) for row in rows]


def _upsert(dialect: str) -> Executable:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(MetricTotal)
    return stmt.on_conflict_do_update(
        index_elements=[MetricTotal.name, MetricTotal.labels, MetricTotal.part],
        set_={"value": MetricTotal.value + stmt.excluded.value},
    )


class Flusher:
    """The thread that flushes a ``Database``'s tally every ``FLUSH_EVERY`` seconds."""

    def __init__(self, flush: Callable[[], None], every: float = FLUSH_EVERY) -> None:
        self._flush = flush
        self._every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="metric-flusher", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout=self._every + 5)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._flush()
            except Exception:  # the flusher thread outlives any failure; counts wait
                LOG.warning("could not store the counted metrics; retrying", exc_info=True)
