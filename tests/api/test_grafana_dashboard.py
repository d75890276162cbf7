"""The sample Grafana dashboard: importable, and every metric it charts is served.

A panel naming a metric ``GET /metrics`` does not serve shows "No data"
forever without any error, so the check is made against a real scrape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.api import make_available
from tests.support.stack import Stack

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "metalforge-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
METRIC = re.compile(r"\bmetalforge_[A-Za-z0-9_:]*")
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL text: the panels' targets and the query variables'."""
    found = [target["expr"] for panel in _panels(dashboard) for target in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append(query["query"] if isinstance(query, dict) else query)
    return found


def _metric_names(expressions: list[str]) -> set[str]:
    return {name for expr in expressions for name in METRIC.findall(expr)}


def _served_names(exposition: str) -> set[str]:
    """The series names an exposition serves or declares.

    A counter is served as ``<name>_total``, a histogram as ``<name>_bucket``,
    ``_sum`` and ``_count``, a gauge under its own name. A family with no
    series yet (no BMC has failed) still declares its name and type, and
    its series names follow from them.
    """
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in HISTOGRAM_SERIES)
        else:
            names.add(family.name)
    return names


def _overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def test_dashboard_structure() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "metalforge-overview"
    assert dashboard["schemaVersion"] == 39
    assert dashboard["title"]
    assert "metalforge" in dashboard["tags"]
    assert dashboard["time"]["from"].startswith("now-")
    assert dashboard["refresh"]
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    group = variables["conductor_group"]
    assert group["type"] == "query"
    assert group["datasource"] == DATASOURCE
    query = group["query"]["query"] if isinstance(group["query"], dict) else group["query"]
    assert query == "label_values(metalforge_nodes, conductor_group)"

    panels = list(_panels(dashboard))
    assert panels
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {sorted(ids)}"
    for panel in panels:
        title = panel["title"]
        assert panel["datasource"] == DATASOURCE, title
        assert panel["targets"], f"{title} has no target"
        for target in panel["targets"]:
            assert target["expr"].strip(), f"{title} has a target without an expression"
            assert target.get("datasource", DATASOURCE) == DATASOURCE, title
        grid = panel["gridPos"]
        assert grid["x"] >= 0, title
        assert min(grid["w"], grid["h"]) > 0, title
        assert grid["x"] + grid["w"] <= 24, f"{title} is wider than the grid"
    for i, panel in enumerate(panels):
        for other in panels[i + 1 :]:
            assert not _overlap(panel["gridPos"], other["gridPos"]), (
                f"{panel['title']} overlaps {other['title']}"
            )


def test_the_check_refuses_names_that_are_not_served() -> None:
    exposition = (
        "# HELP metalforge_nodes Nodes.\n# TYPE metalforge_nodes gauge\nmetalforge_nodes 3.0\n"
        "# HELP metalforge_flows_started_total Flows.\n"
        "# TYPE metalforge_flows_started_total counter\n"
        "# HELP metalforge_step_duration_seconds Steps.\n"
        "# TYPE metalforge_step_duration_seconds histogram\n"
    )
    served = _served_names(exposition)
    used = _metric_names(
        [
            "sum(metalforge_nodes) + sum(rate(metalforge_flows_started_total[5m]))",
            "rate(metalforge_step_duration_seconds_bucket[1h])",
            "metalforge_step_duration_seconds_sum / metalforge_step_duration_seconds_count",
        ]
    )
    assert used <= served
    for wrong in (
        "metalforge_made_up",
        "metalforge_nodes_total",  # a gauge has no _total
        "metalforge_flows_started",  # a counter is served only as _total
        "metalforge_step_duration_seconds",  # a histogram only as its series
    ):
        assert _metric_names([f"sum({wrong})"]) - served == {wrong}


def test_every_charted_metric_is_served(sqlite_stack: Stack) -> None:
    node = make_available(sqlite_stack.client)
    assert node["provision_state"] == "available"
    response = sqlite_stack.client.get("/metrics")
    assert response.status_code == 200, response.text
    served = _served_names(response.text)

    used = _metric_names(_expressions(_dashboard()))
    assert "metalforge_flows_finished_total" in used
    assert "metalforge_step_duration_seconds_bucket" in used
    missing = sorted(used - served)
    assert not missing, f"the dashboard charts metrics /metrics does not serve: {missing}"
