"""Step run times: recorded as steps finish, read back as estimates of time left.

An estimate for a step is the median of the newest ``KEPT`` runs of the same
step (interface and name) on the same hardware type: the median, because one
run that waited on a slow BMC or a hung disk should not move the estimate
much, and the newest runs, because firmware and disks change over a fleet's
life. Failed steps are not recorded: how long a step takes to fail says
nothing about how long it takes to succeed.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, delete, func, insert, select

from metalforge.db.models import StepRun, utcnow

KEPT = 20
"""Runs kept (and used) per step and hardware type."""

StepKey = tuple[str, str]
"""``(interface, step)``."""

_INSERT = insert(StepRun)
_NEWEST_FIRST = (
    func.row_number()
    .over(
        partition_by=(StepRun.hardware_type, StepRun.interface, StepRun.step),
        order_by=StepRun.id.desc(),
    )
    .label("newness")
)


@dataclass(frozen=True, slots=True)
class Estimate:
    seconds: float
    """The median of the recorded runs."""
    samples: int


def record(
    connection: Connection,
    hardware_type: str,
    runs: Iterable[tuple[str, str, float]],
) -> None:
    """Add successful runs, each ``(interface, step, seconds)``.

    Written in the transaction of the node's next save, which on SQLite
    holds the service's only write lock: so one prepared statement for all
    of them, and nothing dropped here; ``prune`` trims the table later.
    """
    finished_at = utcnow()
    rows = [
        {
            "hardware_type": hardware_type,
            "interface": interface,
            "step": step,
            "seconds": max(0.0, seconds),
            "finished_at": finished_at,
        }
        for interface, step, seconds in runs
    ]
    if rows:
        connection.execute(_INSERT, rows)


def prune(connection: Connection) -> int:
    """Drop every run beyond the newest ``KEPT`` of its step and hardware type; how many."""
    ranked = select(StepRun.id, _NEWEST_FIRST).subquery()
    beyond = select(ranked.c.id).where(ranked.c.newness > KEPT)
    return connection.execute(delete(StepRun).where(StepRun.id.in_(beyond))).rowcount


def estimates(
    connection: Connection, hardware_type: str, steps: Iterable[StepKey]
) -> dict[StepKey, Estimate]:
    """The estimate of each of ``steps`` that has recorded runs on ``hardware_type``.

    Only the newest ``KEPT`` runs count, whether or not older ones are
    pruned yet.
    """
    wanted = set(steps)
    if not wanted:
        return {}
    ranked = (
        select(StepRun.interface, StepRun.step, StepRun.seconds, _NEWEST_FIRST)
        .where(
            StepRun.hardware_type == hardware_type,
            StepRun.step.in_({step for _interface, step in wanted}),
        )
        .subquery()
    )
    rows = connection.execute(
        select(ranked.c.interface, ranked.c.step, ranked.c.seconds).where(ranked.c.newness <= KEPT)
    ).all()
    runs: dict[StepKey, list[float]] = {}
    for interface, step, seconds in rows:
        if (interface, step) in wanted:
            runs.setdefault((interface, step), []).append(seconds)
    return {key: Estimate(statistics.median(values), len(values)) for key, values in runs.items()}
