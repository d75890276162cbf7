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

from sqlalchemy import Connection, delete, insert, select

from metalforge.db.models import StepRun, utcnow

KEPT = 20
"""Runs kept (and used) per step and hardware type."""

StepKey = tuple[str, str]
"""``(interface, step)``."""


@dataclass(frozen=True, slots=True)
class Estimate:
    seconds: float
    """The median of the recorded runs."""
    samples: int


def record(
    connection: Connection, hardware_type: str, interface: str, step: str, seconds: float
) -> None:
    """Add one successful run, dropping what falls beyond the newest ``KEPT``."""
    connection.execute(
        insert(StepRun).values(
            hardware_type=hardware_type,
            interface=interface,
            step=step,
            seconds=max(0.0, seconds),
            finished_at=utcnow(),
        )
    )
    same = (
        (StepRun.hardware_type == hardware_type)
        & (StepRun.interface == interface)
        & (StepRun.step == step)
    )
    newest = select(StepRun.id).where(same).order_by(StepRun.id.desc()).limit(KEPT)
    connection.execute(delete(StepRun).where(same, StepRun.id.not_in(newest)))


def estimates(
    connection: Connection, hardware_type: str, steps: Iterable[StepKey]
) -> dict[StepKey, Estimate]:
    """The estimate of each of ``steps`` that has recorded runs on ``hardware_type``."""
    wanted = set(steps)
    if not wanted:
        return {}
    rows = connection.execute(
        select(StepRun.interface, StepRun.step, StepRun.seconds).where(
            StepRun.hardware_type == hardware_type,
            StepRun.step.in_({step for _interface, step in wanted}),
        )
    ).all()
    runs: dict[StepKey, list[float]] = {}
    for interface, step, seconds in rows:
        if (interface, step) in wanted:
            runs.setdefault((interface, step), []).append(seconds)
    return {key: Estimate(statistics.median(values), len(values)) for key, values in runs.items()}
