"""``GET /v1/nodes/{node}/progress``: the flow's steps, their status and the time left."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select, update

from metalforge.db import flow_progress, step_runs
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import Node, StepRun
from tests.support.api import LATEST, create_node, make_available
from tests.support.stack import Stack, start_stack, test_settings

ERASE_METADATA = {"interface": "deploy", "step": "erase_devices_metadata", "priority": 99}
ERASE = {"interface": "deploy", "step": "erase_devices", "priority": 10}
BIOS = {"interface": "management", "step": "reset_bios", "priority": 5}


@pytest.fixture
def idle_stack(sqlite_url: str) -> Iterator[Stack]:
    """The API on SQLite with its conductor registered but not running: a node parked in
    ``clean wait`` stays at the step the test put it on (a running conductor would poll
    the fake step and move on)."""
    running = start_stack(test_settings(sqlite_url), start_conductor=False)
    try:
        yield running
    finally:
        running.stop()


def _park_in_cleaning(stack: Stack, uuid: str, step_index: int, started_ago: float) -> None:
    """Put the node where a conductor running its clean plan would have left it."""
    now = stack.db.now().timestamp()
    with stack.db.write() as session:
        session.execute(
            update(Node)
            .where(Node.uuid == uuid)
            .values(provision_state="clean wait", target_provision_state="available")
        )
        node_id = session.scalars(select(Node.id).where(Node.uuid == uuid)).one()
        flow_progress.write(
            session.connection(),
            node_id,
            FlowProgress(
                flow="clean",
                plan=(ERASE_METADATA, ERASE, BIOS),
                step_index=step_index,
                step_started_at=now - started_ago,
            ),
        )


def _progress(stack: Stack, ident: str) -> dict[str, object]:
    response = stack.client.get(f"/v1/nodes/{ident}/progress", headers=LATEST)
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_a_node_at_rest_has_no_flow(sqlite_stack: Stack) -> None:
    node = create_node(sqlite_stack.client, name="resting")
    body = _progress(sqlite_stack, "resting")
    assert body["node_uuid"] == node["uuid"]
    assert body["flow"] is None
    assert body["steps"] == []
    assert body["estimated_seconds_left"] is None


def test_the_last_flows_timeline_lists_its_states_with_their_durations(
    sqlite_stack: Stack,
) -> None:
    node = make_available(sqlite_stack.client, name="timed")
    body = _progress(sqlite_stack, node["uuid"])
    assert body["flow"] is None, "at rest: the timeline is the last flow's"
    assert body["flow_started_at"] is not None
    phases = body["phases"]
    assert isinstance(phases, list)
    assert [p["state"] for p in phases] == ["cleaning", "available"], phases
    assert all(p["seconds"] >= 0 for p in phases)
    assert phases[0]["entered_at"] >= body["flow_started_at"]


def test_estimates_come_from_recent_runs_of_the_same_step(idle_stack: Stack) -> None:
    node = create_node(idle_stack.client)
    with idle_stack.db.write() as session:
        step_runs.record(
            session.connection(),
            "fake-hardware",
            [
                *(("deploy", "erase_devices", seconds) for seconds in (10.0, 30.0, 20.0)),
                ("management", "reset_bios", 4.0),
            ],
        )
        # Another hardware type's runs say nothing about this one.
        step_runs.record(session.connection(), "redfish", [("management", "reset_bios", 400.0)])
    _park_in_cleaning(idle_stack, node["uuid"], step_index=1, started_ago=5.0)
    body = _progress(idle_stack, node["uuid"])
    assert body["flow"] == "clean"
    assert (body["step_index"], body["step_count"]) == (1, 3)
    steps = body["steps"]
    assert isinstance(steps, list)
    assert [s["status"] for s in steps] == ["done", "running", "pending"]
    assert steps[1]["estimated_seconds"] == 20.0  # the median of 10, 30 and 20
    assert steps[1]["samples"] == 3
    assert steps[2]["estimated_seconds"] == 4.0
    current = body["current_step"]
    assert isinstance(current, dict)
    assert current["step"] == "erase_devices"
    assert current["elapsed_seconds"] >= 5.0
    left = body["estimated_seconds_left"]
    assert isinstance(left, float)
    # 20 s estimated, at least 5 gone, plus the 4 s step to come.
    assert 4.0 <= left <= 19.0
    assert body["estimated_finish_at"] is not None


def test_no_estimate_while_a_step_to_come_never_ran_here(idle_stack: Stack) -> None:
    node = create_node(idle_stack.client)
    with idle_stack.db.write() as session:
        step_runs.record(session.connection(), "fake-hardware", [("deploy", "erase_devices", 10.0)])
    _park_in_cleaning(idle_stack, node["uuid"], step_index=1, started_ago=1.0)
    body = _progress(idle_stack, node["uuid"])
    assert body["estimated_seconds_left"] is None  # reset_bios has no recorded run
    steps = body["steps"]
    assert isinstance(steps, list)
    assert steps[2]["estimated_seconds"] is None
    assert steps[2]["samples"] == 0


def test_finished_steps_are_recorded_and_only_the_newest_kept(stack: Stack) -> None:
    make_available(stack.client)  # automated cleaning ran both fake erase steps
    with stack.db.snapshot() as connection:
        found = step_runs.estimates(
            connection, "fake-hardware", [("deploy", "erase_devices"), ("deploy", "nothing")]
        )
    assert set(found) == {("deploy", "erase_devices")}
    assert found[("deploy", "erase_devices")].samples == 1
    erase_runs = [("deploy", "erase_devices", float(s)) for s in range(step_runs.KEPT + 5)]
    with stack.db.write() as session:
        step_runs.record(session.connection(), "fake-hardware", erase_runs)
        step_runs.record(session.connection(), "redfish", erase_runs[:3])

    def erase_estimate() -> step_runs.Estimate:
        with stack.db.snapshot() as connection:
            found = step_runs.estimates(connection, "fake-hardware", [("deploy", "erase_devices")])
        return found[("deploy", "erase_devices")]

    # Only the newest runs count, before the upkeep trims the table and after
    # (the stack's own upkeep may trim it first: only what is left is certain).
    for _trimmed in (False, True):
        estimate = erase_estimate()
        assert estimate.samples == step_runs.KEPT
        assert estimate.seconds == pytest.approx(14.5)  # the median of 5..24
        with stack.db.write() as session:
            step_runs.prune(session.connection())
    with stack.db.snapshot() as connection:
        left = dict(
            connection.execute(
                select(StepRun.hardware_type, func.count())
                .where(StepRun.interface == "deploy", StepRun.step == "erase_devices")
                .group_by(StepRun.hardware_type)
            ).all()
        )
    assert left == {"fake-hardware": step_runs.KEPT, "redfish": 3}  # other keys keep theirs


def test_unknown_node_is_404(sqlite_stack: Stack) -> None:
    response = sqlite_stack.client.get("/v1/nodes/none-such/progress", headers=LATEST)
    assert response.status_code == 404
