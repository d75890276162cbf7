"""The cluster's figures in Prometheus' text format (prometheus-client renders it)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from metalforge import tallies
from metalforge.services.metrics import KNOWN_SERIES, PROVISION_STATES, ClusterFigures

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Figures(Collector):
    """Yields the families of one set of figures (a registry per scrape)."""

    def __init__(self, figures: ClusterFigures) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        yield from _nodes(self.figures)
        yield from _work(self.figures)
        yield from _conductors(self.figures)
        yield from _allocations_and_inspections(self.figures)
        yield from _filter_hosts(self.figures)
        yield from _firmware_drift(self.figures)
        yield from _rollouts(self.figures)
        yield from _breakers(self.figures)
        yield from _event_totals(self.figures)


def _nodes(figures: ClusterFigures) -> Iterator[Metric]:
    labels = ["provision_state", "power_state", "maintenance", "conductor_group"]
    nodes = GaugeMetricFamily(
        "metalforge_nodes",
        "Enrolled nodes by provision state, power state, maintenance and group.",
        labels=labels,
    )
    by_state = GaugeMetricFamily(
        "metalforge_nodes_by_provision_state",
        "Enrolled nodes by provision state alone (every state, 0 when none).",
        labels=["provision_state"],
    )
    totals = dict.fromkeys(PROVISION_STATES, 0)
    for n in figures.nodes:
        nodes.add_metric(
            [n.provision_state, n.power_state, str(n.maintenance).lower(), n.conductor_group],
            n.count,
        )
        totals[n.provision_state] = totals.get(n.provision_state, 0) + n.count
    for state, count in sorted(totals.items()):
        by_state.add_metric([state], count)
    by_health = GaugeMetricFamily(
        "metalforge_nodes_by_health",
        "Enrolled nodes by the health their BMC reports (unknown: it says nothing).",
        labels=["health"],
    )
    for health, count in figures.health.items():
        by_health.add_metric([health], count)
    yield nodes
    yield by_state
    yield by_health


def _work(figures: ClusterFigures) -> Iterator[Metric]:
    items = GaugeMetricFamily(
        "metalforge_work_queue_items", "Unfinished and dead-lettered work items by kind and state.",
        labels=["kind", "state"],
    )  # fmt: skip
    oldest = GaugeMetricFamily(
        "metalforge_work_queue_oldest_item_age_seconds",
        "How long the oldest unfinished item of each kind has waited.",
        labels=["kind"],
    )
    for w in figures.work:
        for state, count in (("pending", w.pending), ("claimed", w.claimed), ("dead", w.dead)):
            items.add_metric([w.kind, state], count)
        oldest.add_metric([w.kind], w.oldest_age)
    yield items
    yield oldest


def _conductors(figures: ClusterFigures) -> Iterator[Metric]:
    up = GaugeMetricFamily(
        "metalforge_conductor_up", "1 for a conductor alive by its heartbeats, else 0.",
        labels=["conductor", "conductor_group"],
    )  # fmt: skip
    age = GaugeMetricFamily(
        "metalforge_conductor_heartbeat_age_seconds", "Seconds since each conductor's heartbeat.",
        labels=["conductor"],
    )  # fmt: skip
    for c in figures.conductors:
        up.add_metric([c.hostname, c.conductor_group], 1 if c.alive else 0)
        age.add_metric([c.hostname], c.heartbeat_age)
    yield up
    yield age


def _firmware_drift(figures: ClusterFigures) -> Iterator[Metric]:
    drifted = GaugeMetricFamily(
        "metalforge_firmware_drift_nodes",
        "Nodes a firmware baseline covers whose component is older than the baseline's, "
        "differs from it or is unknown, by baseline, component and status.",
        labels=["baseline", "component", "status"],
    )
    for (baseline, component, status), count in sorted(figures.firmware_drift.items()):
        drifted.add_metric([baseline, component, status], count)
    yield drifted


def _breakers(figures: ClusterFigures) -> Iterator[Metric]:
    open_now = GaugeMetricFamily(
        "metalforge_bmc_breaker_open",
        "BMCs whose circuit breaker is open now (calls to them fail at once), by protocol, "
        "address and the process refusing them; the value is the failures in a row.",
        labels=["protocol", "address", "holder"],
    )
    for breaker in figures.open_breakers:
        open_now.add_metric([breaker.protocol, breaker.address, breaker.holder], breaker.failures)
    yield open_now


def _rollouts(figures: ClusterFigures) -> Iterator[Metric]:
    nodes = GaugeMetricFamily(
        "metalforge_rollout_nodes",
        "Nodes of live rollouts (pending, running, paused) by their state in the rollout.",
        labels=["state"],
    )
    for state, count in sorted(figures.rollout_nodes.items()):
        nodes.add_metric([state], count)
    yield nodes


def _allocations_and_inspections(figures: ClusterFigures) -> Iterator[Metric]:
    allocations = GaugeMetricFamily(
        "metalforge_allocations", "Allocations by state.", labels=["state"]
    )
    for state in sorted({"allocating", "active", "error", *figures.allocations}):
        allocations.add_metric([state], figures.allocations.get(state, 0))
    yield allocations
    inspections = GaugeMetricFamily(
        "metalforge_introspections", "Introspection records by state.", labels=["state"]
    )
    for state, count in sorted(figures.introspections.items()):
        inspections.add_metric([state], count)
    yield inspections


def _filter_hosts(figures: ClusterFigures) -> Iterator[Metric]:
    labels = ["filter_host", "driver"]
    families = {
        "passing": GaugeMetricFamily(
            "metalforge_pxe_filter_passing",
            "1 for the filter host whose DHCP service answers (the leader).", labels=labels,
        ),
        "failing": GaugeMetricFamily(
            "metalforge_pxe_filter_failing",
            "1 for a filter host whose last round failed (it blocks everything).", labels=labels,
        ),
        "allowed": GaugeMetricFamily(
            "metalforge_pxe_filter_allowed_macs", "MACs a filter host lets through.", labels=labels
        ),
        "denied": GaugeMetricFamily(
            "metalforge_pxe_filter_denied_macs", "MACs a filter host refuses.", labels=labels
        ),
        "report": GaugeMetricFamily(
            "metalforge_pxe_filter_report_age_seconds",
            "Seconds since a filter host last reported (a host that is gone keeps growing).",
            labels=labels,
        ),
    }  # fmt: skip
    for h in figures.filter_hosts:
        key = [h.hostname, h.driver]
        families["passing"].add_metric(key, 1 if h.mode == "passing" else 0)
        families["failing"].add_metric(key, 1 if h.failing else 0)
        families["allowed"].add_metric(key, h.allowed)
        families["denied"].add_metric(key, h.denied)
        families["report"].add_metric(key, h.seconds_since_report)
    yield from families.values()


def _event_totals(figures: ClusterFigures) -> Iterator[Metric]:
    """The event counters and histograms every process added to the cluster's totals."""
    rows: dict[str, dict[str, dict[str, float]]] = {}
    for name, labels, part, value in figures.totals:
        rows.setdefault(name, {}).setdefault(labels, {})[part] = value
    for metric in tallies.METRICS:
        series = rows.get(metric.name, {})
        for known in KNOWN_SERIES.get(metric.name, ()):
            series.setdefault(tallies.LABEL_SEPARATOR.join(known), {})
        if metric.is_histogram:
            yield _histogram(metric, series)
        else:
            counter = CounterMetricFamily(metric.name, metric.help, labels=list(metric.labels))
            for labels, parts in sorted(series.items()):
                counter.add_metric(tallies.split_labels(metric, labels), parts.get("", 0.0))
            yield counter


def _histogram(metric: tallies.Metric, series: dict[str, dict[str, float]]) -> Metric:
    family = HistogramMetricFamily(metric.name, metric.help, labels=list(metric.labels))
    for labels, parts in sorted(series.items()):
        buckets = [
            (tallies.bucket_label(bound), parts.get(tallies.bucket_label(bound), 0.0))
            for bound in metric.buckets
        ]
        buckets.append((tallies.INF, parts.get(tallies.INF, 0.0)))
        family.add_metric(
            tallies.split_labels(metric, labels), buckets, sum_value=parts.get(tallies.SUM, 0.0)
        )
    return family


def render(figures: ClusterFigures) -> bytes:
    """The exposition text of ``figures``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Figures(figures))
    return generate_latest(registry)
