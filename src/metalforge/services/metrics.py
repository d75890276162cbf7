"""The cluster's figures for ``GET /metrics``, read from the database at scrape time.

Every API process answers with the same figures (they come from the shared
database, not from what one process saw), so a Prometheus behind a load
balancer scrapes one consistent view. One read transaction, a handful of
``GROUP BY`` queries; nothing here writes.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from metalforge import states, tallies
from metalforge.db import bmc_breakers, queue
from metalforge.db import tallies as db_tallies
from metalforge.db.models import (
    Allocation,
    Conductor,
    Introspection,
    Node,
    PxeFilterHost,
    WorkItem,
)
from metalforge.drivers.base import HEALTH_STATES
from metalforge.services import firmware_baselines, rollouts
from metalforge.services.context import Services

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeCount:
    provision_state: str
    power_state: str
    maintenance: bool
    conductor_group: str
    count: int


@dataclass(frozen=True)
class QueueFigure:
    kind: str
    pending: int
    claimed: int
    dead: int
    oldest_age: float
    """Seconds the oldest unfinished item of this kind has waited (0: none)."""


@dataclass(frozen=True)
class ConductorFigure:
    hostname: str
    conductor_group: str
    alive: bool
    heartbeat_age: float


@dataclass(frozen=True)
class FilterHostFigure:
    hostname: str
    driver: str
    mode: str
    allowed: int
    denied: int
    failing: bool
    seconds_since_sync: float | None
    seconds_since_report: float


@dataclass(frozen=True)
class ClusterFigures:
    nodes: list[NodeCount]
    work: list[QueueFigure]
    conductors: list[ConductorFigure]
    allocations: dict[str, int]
    introspections: dict[str, int]
    health: dict[str, int]
    """Nodes by the health their BMC reports (``unknown``: it says nothing)."""
    filter_hosts: list[FilterHostFigure]
    firmware_drift: dict[tuple[str, str, str], int]
    """Nodes off each firmware baseline, by (baseline, component, status)."""
    rollout_nodes: dict[str, int]
    """Nodes of live rollouts by their state in them."""
    open_breakers: list[bmc_breakers.OpenBreaker]
    """BMCs a process refuses to call for now."""
    totals: list[tuple[str, str, str, float]]
    """The event counters' and histograms' rows (``db.tallies.totals``)."""


PROVISION_STATES = tuple(sorted(states.STATES))
"""Every provision state, so a state with no node reads 0 rather than missing."""

_FLOWS = sorted(set(states.FLOW_OF.values()))
KNOWN_SERIES: dict[str, list[tuple[str, ...]]] = {
    tallies.FLOWS_STARTED.name: [(flow,) for flow in _FLOWS],
    tallies.FLOWS_FINISHED.name: [
        (flow, result) for flow in _FLOWS for result in ("succeeded", "failed", "aborted")
    ],
    tallies.ALLOCATIONS_FINISHED.name: [("active",), ("error",)],
}
"""Counter series shown as 0 before anything happened, so absent never means zero."""


def _age(now: dt.datetime, then: dt.datetime | None) -> float:
    return 0.0 if then is None else max(0.0, (now - then).total_seconds())


HEALTH_VALUES = (*HEALTH_STATES, "unknown")
"""Every health a node is counted under, so a value no node has reads 0."""


def _health(rows: Sequence[Any]) -> dict[str, int]:
    counts = dict.fromkeys(HEALTH_VALUES, 0)
    for health, count in rows:
        key = health if health in HEALTH_STATES else "unknown"
        counts[key] += int(count)
    return counts


def cluster_figures(svc: Services) -> ClusterFigures:
    """Nodes, work, conductors, allocations, inspections and PXE filter hosts, now, and
    the event totals (this process's own counts added first, so they are never stale)."""
    dead_after = svc.settings.conductor.heartbeat_timeout
    try:
        svc.db.flush_tally()
    except SQLAlchemyError:  # the figures are still worth answering with
        LOG.warning("could not store this process's counts before a scrape", exc_info=True)
    with svc.db.read() as session:
        now = svc.db.now()
        node_rows = session.execute(
            select(
                Node.provision_state,
                Node.power_state,
                Node.maintenance,
                Node.conductor_group,
                func.count(),
            ).group_by(
                Node.provision_state, Node.power_state, Node.maintenance, Node.conductor_group
            )
        ).all()
        work_rows = session.execute(
            select(WorkItem.kind, WorkItem.state, func.count(), func.min(WorkItem.created_at))
            .where(WorkItem.state.in_([queue.PENDING, queue.CLAIMED, queue.DEAD]))
            .group_by(WorkItem.kind, WorkItem.state)
        ).all()
        conductor_rows = session.scalars(select(Conductor).order_by(Conductor.hostname)).all()
        allocation_rows = session.execute(
            select(Allocation.state, func.count()).group_by(Allocation.state)
        ).all()
        inspection_rows = session.execute(
            select(Introspection.state, func.count()).group_by(Introspection.state)
        ).all()
        health_rows = session.execute(select(Node.health, func.count()).group_by(Node.health)).all()
        filter_rows = session.scalars(select(PxeFilterHost).order_by(PxeFilterHost.hostname)).all()
        drift = firmware_baselines.drift_counts(session)
        in_rollouts = rollouts.node_counts(session)
        breakers = bmc_breakers.open_now(session, now)
        totals = db_tallies.totals(session.connection())
    return ClusterFigures(
        nodes=[
            NodeCount(row[0], row[1] or "None", bool(row[2]), row[3] or "", row[4])
            for row in node_rows
        ],
        work=_work([(r[0], r[1], int(r[2]), r[3]) for r in work_rows], now),
        conductors=[
            ConductorFigure(
                c.hostname,
                c.conductor_group,
                c.online and _age(now, c.heartbeat_at) < dead_after,
                _age(now, c.heartbeat_at),
            )
            for c in conductor_rows
        ],
        allocations={state: int(count) for state, count in allocation_rows},
        introspections={state: int(count) for state, count in inspection_rows},
        health=_health(health_rows),
        filter_hosts=[
            FilterHostFigure(
                h.hostname,
                h.driver,
                h.mode,
                h.allowed,
                h.denied,
                h.error is not None,
                None if h.synced_at is None else _age(now, h.synced_at),
                _age(now, h.updated_at),
            )
            for h in filter_rows
        ],
        firmware_drift=drift,
        rollout_nodes=in_rollouts,
        open_breakers=breakers,
        totals=totals,
    )


def _work(
    rows: list[tuple[str, str, int, dt.datetime | None]], now: dt.datetime
) -> list[QueueFigure]:
    by_kind: dict[str, dict[str, int]] = {}
    oldest: dict[str, float] = {}
    for kind, state, count, first in rows:
        by_kind.setdefault(kind, {})[state] = count
        if state != queue.DEAD:
            oldest[kind] = max(oldest.get(kind, 0.0), _age(now, first))
    return [
        QueueFigure(
            kind,
            counts.get(queue.PENDING, 0),
            counts.get(queue.CLAIMED, 0),
            counts.get(queue.DEAD, 0),
            oldest.get(kind, 0.0),
        )
        for kind, counts in sorted(by_kind.items())
    ]
