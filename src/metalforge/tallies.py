"""Event counters and histograms, counted in memory and added to the cluster's totals.

``GET /metrics`` shows figures of two kinds. Gauges (how many nodes are in
each state now) are read from the database at each scrape. Events (a flow
finished, a step took 40 s, a BMC timed out) happen in whichever process ran
them, on whichever host; each process counts them here and its ``Database``
adds them to the shared ``metric_totals`` table every few seconds
(``db.tallies``), so every API process reports the same cluster-wide,
restart-proof totals and no event costs a write of its own.

Every metric is declared once below, with its labels and, for a histogram,
its buckets; label values must come from small fixed sets (states, step
names, error kinds, route templates), never from node names or messages.
(The gauges read from the database at each scrape, in ``services.metrics``,
may name a few things of the moment: a baseline, a BMC whose breaker is open.)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

LABEL_SEPARATOR = "\x1f"
"""Joins label values in ``metric_totals.labels`` (it cannot appear in a label value)."""
SUM = "sum"
COUNT = "count"
INF = "+Inf"


@dataclass(frozen=True)
class Metric:
    """One counter (``buckets`` empty) or histogram, as Prometheus will show it."""

    name: str
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()

    @property
    def is_histogram(self) -> bool:
        return bool(self.buckets)


STEP_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)
FLOW_BUCKETS = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0)
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

FLOWS_STARTED = Metric(
    "metalforge_flows_started", "Flows started, by kind (clean, deploy, inspect...).", ("flow",)
)
FLOWS_FINISHED = Metric(
    "metalforge_flows_finished",
    "Flows ended, by kind and result (succeeded, failed, aborted).",
    ("flow", "result"),
)
STEP_DURATION = Metric(
    "metalforge_step_duration_seconds",
    "How long successful clean, deploy and service steps took, by interface and step.",
    ("interface", "step"),
    STEP_BUCKETS,
)
WORK_ABANDONED = Metric(
    "metalforge_work_items_abandoned",
    "Work items whose call passed its deadline and was abandoned, by kind.",
    ("kind",),
)
TAKEOVERS = Metric(
    "metalforge_conductor_takeovers",
    "Nodes taken over from a conductor declared dead, by conductor group.",
    ("conductor_group",),
)
ALLOCATIONS_FINISHED = Metric(
    "metalforge_allocations_finished", "Allocations ended, by result (active, error).", ("result",)
)
ALLOCATION_DURATION = Metric(
    "metalforge_allocation_duration_seconds",
    "From an allocation's creation to its result, by result.",
    ("result",),
    (*REQUEST_BUCKETS, 30.0, 60.0, 300.0),
)
BMC_ERRORS = Metric(
    "metalforge_bmc_errors",
    "Failed calls to BMCs, by protocol (redfish, ipmi) and kind (timeout, connection, "
    "auth, refused, protocol; busy and circuit_open: refused by metalforge itself, "
    "sparing a BMC at its limit or one that stopped answering).",
    ("protocol", "kind"),
)
BMC_CALL_DURATION = Metric(
    "metalforge_bmc_call_duration_seconds",
    "How long calls to BMCs took, from getting a slot to the answer, by protocol.",
    ("protocol",),
    (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
BMC_BREAKER_TRIPS = Metric(
    "metalforge_bmc_breaker_trips",
    "Times a BMC failed to answer often enough in a row that calls to it were refused "
    "for a cooling period, by protocol.",
    ("protocol",),
)
AGENT_ERRORS = Metric(
    "metalforge_agent_errors",
    "Failed calls to ramdisk agents, by kind (unreachable, busy, refused).",
    ("kind",),
)
PHASE_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
FLOW_DURATION = Metric(
    "metalforge_flow_duration_seconds",
    "How long flows took from their request to their end, by kind, result and hardware "
    "type (deploy, succeeded: the time to active).",
    ("flow", "result", "hardware_type"),
    (1.0, 2.5, *FLOW_BUCKETS),
)
STATE_DURATION = Metric(
    "metalforge_state_duration_seconds",
    "How long nodes stayed in each state of a flow, by flow, state and hardware type: "
    "the phases (cleaning: a conductor working; clean wait: the agent booting or a step "
    "running on it...), so the one that dominates shows.",
    ("flow", "state", "hardware_type"),
    PHASE_BUCKETS,
)
AGENT_BOOTS = Metric(
    "metalforge_agent_boots",
    "Ramdisk agents a flow started with, by flow (inspect, clean, deploy, service, "
    "rescue) and how: booted (the node was powered on or rebooted into the ramdisk) or "
    "kept (fast track: the agent an earlier flow left running, no reboot).",
    ("flow", "how"),
)
POWER_ACTIONS = Metric(
    "metalforge_power_actions",
    "Power changes metalforge asked of BMCs, by flow (none: an operator's request or "
    "the power sync, on a node in no flow) and target (power on, power off, reboot).",
    ("flow", "target"),
)
DB_WRITES = Metric(
    "metalforge_db_write_transactions",
    "Write transactions committed by the cluster's processes (API and conductors), "
    "the counters' own flushes excepted: divided by the nodes a run moved, what each "
    "node's flows cost the database.",
    (),
)
HTTP_DURATION = Metric(
    "metalforge_http_request_duration_seconds",
    "API requests by method, route template and status, and how long they took.",
    ("method", "route", "status"),
    REQUEST_BUCKETS,
)

METRICS: tuple[Metric, ...] = (
    FLOWS_STARTED,
    FLOWS_FINISHED,
    STEP_DURATION,
    WORK_ABANDONED,
    TAKEOVERS,
    ALLOCATIONS_FINISHED,
    ALLOCATION_DURATION,
    BMC_ERRORS,
    BMC_BREAKER_TRIPS,
    BMC_CALL_DURATION,
    AGENT_ERRORS,
    AGENT_BOOTS,
    POWER_ACTIONS,
    FLOW_DURATION,
    STATE_DURATION,
    DB_WRITES,
    HTTP_DURATION,
)
BY_NAME = {metric.name: metric for metric in METRICS}

Key = tuple[str, str, str]
"""``(metric name, joined label values, part)``: one row of ``metric_totals``."""


def bucket_label(bound: float) -> str:
    """A bucket's bound as stored and shown (``0.005``, ``60.0``)."""
    return INF if math.isinf(bound) else repr(float(bound))


class Tally:
    """What this process counted since the last flush; safe to use from any thread."""

    def __init__(self, on_first_count: Callable[[], None] | None = None) -> None:
        """``on_first_count`` runs once, at the first count (the owner starts flushing)."""
        self._lock = threading.Lock()
        self._deltas: dict[Key, float] = {}
        self._on_first_count = on_first_count

    def count(self, metric: Metric, labels: tuple[str, ...], by: float = 1.0) -> None:
        """Add ``by`` to a counter."""
        self._add({(metric.name, _join(metric, labels), ""): by})

    def observe(self, metric: Metric, labels: tuple[str, ...], value: float) -> None:
        """Record one observation of a histogram (cumulative buckets, as exposed)."""
        joined = _join(metric, labels)
        adds = {
            (metric.name, joined, bucket_label(bound)): 1.0
            for bound in metric.buckets
            if value <= bound
        }
        adds[(metric.name, joined, INF)] = 1.0
        adds[(metric.name, joined, SUM)] = value
        adds[(metric.name, joined, COUNT)] = 1.0
        self._add(adds)

    def _add(self, adds: dict[Key, float]) -> None:
        with self._lock:
            first = self._on_first_count
            self._on_first_count = None
            for key, value in adds.items():
                self._deltas[key] = self._deltas.get(key, 0.0) + value
        if first is not None:
            first()

    def take(self) -> dict[Key, float]:
        """Everything counted so far; the tally starts again from nothing."""
        with self._lock:
            taken, self._deltas = self._deltas, {}
        return taken

    def give_back(self, deltas: dict[Key, float]) -> None:
        """Counts a flush could not store: kept for the next one."""
        with self._lock:
            for key, value in deltas.items():
                self._deltas[key] = self._deltas.get(key, 0.0) + value


def _join(metric: Metric, labels: tuple[str, ...]) -> str:
    if len(labels) != len(metric.labels):
        raise ValueError(f"{metric.name} takes labels {metric.labels}, got {labels}")
    return LABEL_SEPARATOR.join(value.replace(LABEL_SEPARATOR, " ") for value in labels)


def split_labels(metric: Metric, joined: str) -> list[str]:
    """The label values of a stored row, in ``metric.labels`` order."""
    return joined.split(LABEL_SEPARATOR) if metric.labels else []
