"""``GET /metrics``: the cluster's figures, read from the database at each scrape."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from metalforge.api.metrics_port import MetricsPort
from metalforge.db.models import Node, PxeFilterHost, WorkItem, utcnow
from tests.support.api import (
    LATEST,
    create_node,
    make_available,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.auth import basic_auth_settings
from tests.support.stack import Stack, start_stack


def _scrape(stack: Stack) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = stack.client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def _by_state(figures: dict[str, dict[tuple[tuple[str, str], ...], float]], state: str) -> float:
    return figures["metalforge_nodes_by_provision_state"][(("provision_state", state),)]


def test_node_counts_follow_the_nodes_as_they_move(sqlite_stack: Stack) -> None:
    before = _scrape(sqlite_stack)
    assert _by_state(before, "enroll") == 0
    assert _by_state(before, "manageable") == 0  # every state is there, 0 when empty
    node = create_node(sqlite_stack.client)
    assert _by_state(_scrape(sqlite_stack), "enroll") == 1
    assert provision(sqlite_stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(sqlite_stack.client, node["uuid"], "manageable")
    after = _scrape(sqlite_stack)
    assert _by_state(after, "enroll") == 0
    assert _by_state(after, "manageable") == 1
    detailed = after["metalforge_nodes"]
    key = (
        ("conductor_group", ""),
        ("maintenance", "false"),
        ("power_state", "power off"),
        ("provision_state", "manageable"),
    )
    assert detailed[key] == 1


def test_conductors_queue_allocations_and_filter_hosts(sqlite_stack: Stack) -> None:
    with sqlite_stack.db.write() as session:
        session.add(
            PxeFilterHost(
                hostname="pxe-1",
                driver="dnsmasq",
                mode="passing",
                allowed=2,
                denied=40,
                unknown_allowed=False,
                synced_at=utcnow(),
                error=None,
                updated_at=utcnow(),
            )
        )
    response = sqlite_stack.client.post(
        "/v1/allocations", json={"resource_class": "none-such"}, headers=LATEST
    )
    assert response.status_code == 201, response.text
    figures = _scrape(sqlite_stack)
    up = figures["metalforge_conductor_up"]
    assert up[(("conductor", "test-conductor"), ("conductor_group", ""))] == 1
    assert sum(figures["metalforge_allocations"].values()) == 1
    host = (("driver", "dnsmasq"), ("filter_host", "pxe-1"))
    assert figures["metalforge_pxe_filter_passing"][host] == 1
    assert figures["metalforge_pxe_filter_failing"][host] == 0
    assert figures["metalforge_pxe_filter_allowed_macs"][host] == 2
    assert figures["metalforge_pxe_filter_denied_macs"][host] == 40


def test_work_queue_depth_age_and_dead_letters(sqlite_stack: Stack) -> None:
    now = utcnow()
    with sqlite_stack.db.write() as session:
        # A kind no conductor works on, due in an hour: it stays pending.
        session.add(
            WorkItem(
                kind="backlog",
                state="pending",
                payload={},
                not_before=now + dt.timedelta(hours=1),
                created_at=now - dt.timedelta(seconds=90),
            )
        )
        session.add(WorkItem(kind="backlog", state="dead", payload={}, not_before=now))
    figures = _scrape(sqlite_stack)
    items = figures["metalforge_work_queue_items"]
    assert items[(("kind", "backlog"), ("state", "pending"))] == 1
    assert items[(("kind", "backlog"), ("state", "dead"))] == 1
    assert items[(("kind", "backlog"), ("state", "claimed"))] == 0
    assert figures["metalforge_work_queue_oldest_item_age_seconds"][(("kind", "backlog"),)] >= 90


def _series(
    figures: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, **labels: str
) -> float:
    return figures[name][tuple(sorted(labels.items()))]


Figures = dict[str, dict[tuple[tuple[str, str], ...], float]]


def _scrape_when(stack: Stack, ready: Callable[[Figures], bool]) -> Figures:
    """Scrape until ``ready`` holds (counts land just after the commits a test waits for)."""
    found: list[Figures] = []

    def scraped() -> bool:
        found[:] = [_scrape(stack)]
        return ready(found[0])

    wait_until("the counts to reach the totals", scraped)
    return found[0]


def test_event_totals_count_flows_steps_allocations_and_requests(sqlite_stack: Stack) -> None:
    before = _scrape(sqlite_stack)
    assert _series(before, "metalforge_flows_started_total", flow="clean") == 0  # known: 0
    node = make_available(sqlite_stack.client, resource_class="metrics-rc")
    response = sqlite_stack.client.post(
        "/v1/allocations", json={"resource_class": "metrics-rc"}, headers=LATEST
    )
    assert response.status_code == 201, response.text
    allocation = response.json()["uuid"]
    wait_until(
        "the allocation to be active",
        lambda: (
            sqlite_stack.client.get(f"/v1/allocations/{allocation}", headers=LATEST).json()["state"]
            == "active"
        ),
    )
    # A conductor counts right after its commit, which the API may see first: wait for
    # the last counts (the clean that ended, the allocation) to reach the totals.
    after = _scrape_when(
        sqlite_stack,
        lambda f: (
            _series(f, "metalforge_flows_finished_total", flow="clean", result="succeeded") == 1
            and _series(f, "metalforge_allocations_finished_total", result="active") == 1
        ),
    )
    for flow in ("verify", "clean"):
        assert _series(after, "metalforge_flows_started_total", flow=flow) == 1
        assert _series(after, "metalforge_flows_finished_total", flow=flow, result="succeeded") == 1
    assert _series(after, "metalforge_flows_finished_total", flow="clean", result="failed") == 0
    # Automated cleaning ran the fake erase: one run in the step histogram.
    step = {"interface": "deploy", "step": "erase_devices"}
    assert _series(after, "metalforge_step_duration_seconds_count", **step) == 1
    assert _series(after, "metalforge_step_duration_seconds_bucket", le="+Inf", **step) == 1
    assert _series(after, "metalforge_allocations_finished_total", result="active") == 1
    assert _series(after, "metalforge_allocation_duration_seconds_count", result="active") == 1
    created = {"method": "POST", "route": "/v1/nodes", "status": "201"}
    assert _series(after, "metalforge_http_request_duration_seconds_count", **created) == 1
    node_route = {"method": "GET", "route": "/v1/nodes/{node_ident}", "status": "200"}
    assert _series(after, "metalforge_http_request_duration_seconds_count", **node_route) >= 1
    assert node["provision_state"] == "available"
    # The flows and their phases are timed, by hardware type.
    fake = {"hardware_type": "fake-hardware"}
    cleaned = {"flow": "clean", "result": "succeeded", **fake}
    assert _series(after, "metalforge_flow_duration_seconds_count", **cleaned) == 1
    phase = {"flow": "clean", "state": "cleaning", **fake}
    assert _series(after, "metalforge_state_duration_seconds_count", **phase) >= 1
    history = sqlite_stack.client.get(
        f"/v1/nodes/{node['uuid']}/history?detail=true", headers=LATEST
    ).json()["history"]
    # Each move says how long the node stayed in the state it left.
    moves = [e for e in history if " -> " in e["event"]]
    assert [e["event"] for e in moves][-1] == "cleaning -> available (done)"
    assert all(e["duration_seconds"] >= 0 for e in moves), moves


def test_a_flow_that_fails_is_counted_as_failed(sqlite_stack: Stack) -> None:
    node = create_node(sqlite_stack.client, driver_info={"fake_fail_steps": "deploy.erase_devices"})
    assert provision(sqlite_stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(sqlite_stack.client, node["uuid"], "manageable")
    assert provision(sqlite_stack.client, node["uuid"], "provide").status_code == 202
    wait_for_state(sqlite_stack.client, node["uuid"], "clean failed")
    figures = _scrape_when(
        sqlite_stack,
        lambda f: _series(f, "metalforge_flows_finished_total", flow="clean", result="failed") >= 1,
    )
    assert _series(figures, "metalforge_flows_finished_total", flow="clean", result="failed") == 1
    assert (
        _series(figures, "metalforge_flows_finished_total", flow="clean", result="succeeded") == 0
    )


def test_the_metrics_port_serves_the_same_figures_without_credentials(tmp_path: Path) -> None:
    stack = start_stack(basic_auth_settings(f"sqlite:///{tmp_path}/mf.sqlite", tmp_path))
    port = MetricsPort(stack.app.state.services, "127.0.0.1", 0)
    port.start()
    try:
        assert stack.client.get("/metrics").status_code == 401  # the API's own stays guarded
        base = f"http://127.0.0.1:{port.port}"
        answer = requests.get(f"{base}/metrics", timeout=10)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
        names = {f.name for f in text_string_to_metric_families(answer.text)}
        assert {"metalforge_nodes", "metalforge_flows_started"} <= names
        assert requests.get(f"{base}/v1/nodes", timeout=10).status_code == 404
    finally:
        port.stop()
        stack.stop()


def test_nodes_are_counted_by_the_health_their_bmc_reports(sqlite_stack: Stack) -> None:
    empty = _scrape(sqlite_stack)["metalforge_nodes_by_health"]
    assert empty == {(("health", h),): 0 for h in ("OK", "Warning", "Critical", "unknown")}
    sick = create_node(sqlite_stack.client)
    create_node(sqlite_stack.client)
    with sqlite_stack.db.write() as session:  # as the power sync records a BMC's rating
        session.execute(update(Node).where(Node.uuid == sick["uuid"]).values(health="Critical"))
    counted = _scrape(sqlite_stack)["metalforge_nodes_by_health"]
    assert counted[(("health", "Critical"),)] == 1
    assert counted[(("health", "unknown"),)] == 1
