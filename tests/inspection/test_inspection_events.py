"""Introspection events delivered at least once: timeouts, repeats, stale items, reapply."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from metalforge import inspection_states as ins
from metalforge.api.inspector.app import create_inspector_app
from metalforge.conductor import inspection_report, inspection_sweeps
from metalforge.conductor.flows import inspection_events
from metalforge.db import introspections, queue, throttle
from metalforge.db.engine import now_for
from metalforge.db.introspections import Record
from metalforge.db.models import Node, Port, Throttle, WorkItem
from tests.support.api import (
    LATEST,
    create_node,
    get_node,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.conductors import term_of
from tests.support.stack import AdjustableClock, Stack, start_stack, test_settings


@pytest.fixture
def clocked(db_url: str) -> Iterator[tuple[Stack, AdjustableClock]]:
    clock = AdjustableClock()
    running = start_stack(test_settings(db_url), clock=clock)
    try:
        yield running, clock
    finally:
        running.stop()


def _manageable(stack: Stack, **fields: Any) -> dict[str, Any]:
    node = create_node(stack.client, **fields)
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    return wait_for_state(stack.client, node["uuid"], "manageable")


def _record(stack: Stack, uuid: str) -> Record:
    with stack.db.read() as session:
        record = introspections.load(session, uuid)
    assert record is not None
    return record


def _node_id(stack: Stack, uuid: str) -> int:
    with stack.db.read() as session:
        node_id = session.scalar(select(Node.id).where(Node.uuid == uuid))
    assert node_id is not None
    return node_id


def _queue_event(stack: Stack, uuid: str, event: str, generation: int) -> None:
    with stack.db.write() as session:
        queue.enqueue(
            session,
            inspection_events.WORK_KIND,
            _node_id(stack, uuid),
            {"event": event, "generation": generation},
        )
    stack.conductor.ctx.waker.notify()


def _history(stack: Stack, uuid: str) -> list[str]:
    response = stack.client.get(f"/v1/nodes/{uuid}/history", headers=LATEST)
    return [event["event"] for event in response.json()["history"]]


def _inspected(stack: Stack) -> dict[str, Any]:
    node = _manageable(stack)
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    return wait_for_state(stack.client, node["uuid"], "manageable")


def test_the_sweep_times_out_an_inspection_whose_ramdisk_never_reports(
    clocked: tuple[Stack, AdjustableClock],
) -> None:
    stack, clock = clocked
    node = _manageable(stack, driver_info={"fake_step_delay": 3600})
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    wait_for_state(stack.client, node["uuid"], "inspect wait")
    role = "inspection-timeouts"
    assert inspection_sweeps.time_out_inspections(term_of(stack.conductor, role)) == 0
    clock.advance(stack.settings.conductor.inspection.timeout + 1)
    assert inspection_sweeps.time_out_inspections(term_of(stack.conductor, role)) == 1
    # A second sweep before the item ran queues nothing more (one item per inspection).
    inspection_sweeps.time_out_inspections(term_of(stack.conductor, role))

    def timed_out() -> bool:
        # Sweep again as the periodic sweep would (the clock's jump ended its lease): an
        # item that lost the node to a concurrent write (seen once under the coverage
        # pass's load: "lock lost") is queued again by the next round.
        if get_node(stack.client, node["uuid"])["provision_state"] == "inspect failed":
            return True
        inspection_sweeps.time_out_inspections(term_of(stack.conductor, role))
        return False

    wait_until("the inspection to time out", timed_out)
    failed = get_node(stack.client, node["uuid"])
    assert "timed out" in failed["last_error"]
    assert failed["power_state"] == "power off"
    record = _record(stack, node["uuid"])
    assert record.state == ins.ERROR
    assert "timed out" in (record.error or "")
    assert inspection_sweeps.time_out_inspections(term_of(stack.conductor, role)) == 0


def test_a_report_delivered_twice_is_processed_once(stack: Stack) -> None:
    node = _inspected(stack)
    record = _record(stack, node["uuid"])
    _queue_event(stack, node["uuid"], ins.CONTINUE, record.generation)
    wait_until("the repeated report", lambda: _record(stack, node["uuid"]).state == ins.ERROR)
    assert "not processed twice" in (_record(stack, node["uuid"]).error or "")
    with stack.db.read() as session:
        ports = session.scalar(
            select(func.count())
            .select_from(Port)
            .where(Port.node_id == _node_id(stack, node["uuid"]))
        )
    assert ports == 1
    finished = [e for e in _history(stack, node["uuid"]) if e.startswith("inspection finished")]
    assert len(finished) == 1
    assert get_node(stack.client, node["uuid"])["provision_state"] == "manageable"


def test_an_event_for_an_earlier_inspection_changes_nothing(stack: Stack) -> None:
    node = _inspected(stack)
    record = _record(stack, node["uuid"])
    _queue_event(stack, node["uuid"], ins.CONTINUE, record.generation - 1)
    wait_until(
        "the stale item to be dropped",
        lambda: any("earlier inspection" in e for e in _history(stack, node["uuid"])),
    )
    assert _record(stack, node["uuid"]) == record


def test_a_timeout_that_arrives_after_the_report_is_stale(stack: Stack) -> None:
    node = _inspected(stack)
    record = _record(stack, node["uuid"])
    _queue_event(stack, node["uuid"], ins.TIMEOUT, record.generation)
    wait_until("the queue to drain", lambda: not _pending(stack))
    assert _record(stack, node["uuid"]) == record


def _pending(stack: Stack) -> bool:
    with stack.db.read() as session:
        return bool(
            session.scalar(
                select(func.count())
                .select_from(WorkItem)
                .where(WorkItem.state.in_([queue.PENDING, queue.CLAIMED]))
            )
        )


def test_reapply_processes_the_stored_report_again(stack: Stack) -> None:
    node = _inspected(stack)
    changed = stack.client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[{"op": "replace", "path": "/properties/cpus", "value": 1}],
        headers=LATEST,
    )
    assert changed.status_code == 200, changed.text
    record = _record(stack, node["uuid"])
    _queue_event(stack, node["uuid"], ins.REAPPLY, record.generation)
    wait_until(
        "the reapply",
        lambda: get_node(stack.client, node["uuid"])["properties"]["cpus"] == 8,
    )
    again = _record(stack, node["uuid"])
    assert again.state == ins.FINISHED
    assert get_node(stack.client, node["uuid"])["provision_state"] == "manageable"


def test_a_reapply_that_raises_ends_in_error_and_can_be_started_again(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _inspected(stack)
    record = _record(stack, node["uuid"])
    real = inspection_report.process

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("processing broke")

    monkeypatch.setattr(inspection_report, "process", broken)
    _queue_event(stack, node["uuid"], ins.REAPPLY, record.generation)
    wait_until("the reapply to fail", lambda: _record(stack, node["uuid"]).state == ins.ERROR)
    failed = _record(stack, node["uuid"])
    assert "processing broke" in (failed.error or "")
    assert get_node(stack.client, node["uuid"])["provision_state"] == "manageable"

    monkeypatch.setattr(inspection_report, "process", real)
    _queue_event(stack, node["uuid"], ins.REAPPLY, failed.generation)
    wait_until("the reapply again", lambda: _record(stack, node["uuid"]).state == ins.FINISHED)


def test_the_sweep_forgets_deleted_nodes_and_expires_raw_reports(
    clocked: tuple[Stack, AdjustableClock],
) -> None:
    stack, clock = clocked
    kept = _inspected(stack)
    gone = _inspected(stack)
    assert stack.client.delete(f"/v1/nodes/{gone['uuid']}", headers=LATEST).status_code == 204
    assert inspection_sweeps.forget_deleted_nodes(term_of(stack.conductor, "inspection-sync")) == 1
    with stack.db.read() as session:
        assert introspections.load(session, gone["uuid"]) is None
        assert introspections.load_data(session, gone["uuid"]) is None
        data = introspections.load_data(session, kept["uuid"])
    assert data is not None
    assert data.raw is not None
    clock.advance(stack.settings.conductor.inspection.data_expiry + 1)
    assert inspection_sweeps.expire_reports(term_of(stack.conductor, "inspection-expiry")) == 1
    with stack.db.read() as session:
        data = introspections.load_data(session, kept["uuid"])
    assert data is not None
    assert data.raw is None
    assert data.inventory is not None  # the inventory stays until the node goes


def test_an_event_for_a_deleted_node_is_retried_then_dropped(stack: Stack) -> None:
    node = _inspected(stack)
    record = _record(stack, node["uuid"])
    node_id = _node_id(stack, node["uuid"])
    assert stack.client.delete(f"/v1/nodes/{node['uuid']}", headers=LATEST).status_code == 204
    with stack.db.write() as session:
        queue.enqueue(
            session, inspection_events.WORK_KIND, node_id, {"event": ins.TIMEOUT, "generation": 1}
        )
        item_id = session.scalar(select(func.max(WorkItem.id)))

    def dropped() -> WorkItem | None:
        with stack.db.write() as session:
            # Due at once: skip the growing pause between the tries.
            session.execute(
                update(WorkItem)
                .where(WorkItem.id == item_id, WorkItem.state == queue.PENDING)
                .values(not_before=WorkItem.created_at)
            )
        stack.conductor.ctx.waker.notify()
        with stack.db.read() as session:
            item = session.get(WorkItem, item_id)
        assert item is not None
        return item if item.state == queue.FAILED else None

    item = wait_until("the item to be dropped", dropped)
    assert item.state == queue.FAILED
    assert item.last_error == "its node is gone"
    assert item.failures == stack.settings.conductor.work_item_max_failures - 1
    assert record.generation == 1


def test_nodes_wait_for_their_power_on_turn_unlocked_abortable_and_not_timed_out(
    db_url: str,
) -> None:
    """Three inspections and an hour between power-ons: one node powers on, the two
    others wait for their turns in ``inspect wait`` without holding their reservation.
    One of them is aborted at once; the wait does not count against the timeout, so
    the sweep that fails the powered-on node (its ramdisk never reports) leaves the
    third waiting for its turn, which comes when the clock reaches it."""
    clock = AdjustableClock()
    settings = test_settings(db_url)
    settings.conductor.inspection.power_on_interval = 3600.0
    stack = start_stack(settings, clock=clock)
    try:
        nodes = [_manageable(stack, driver_info={"fake_step_delay": 7200}) for _ in range(3)]
        for node in nodes:
            assert provision(stack.client, node["uuid"], "inspect").status_code == 202

        def parked() -> bool:
            shown = [get_node(stack.client, n["uuid"]) for n in nodes]
            return all(
                n["provision_state"] == "inspect wait" and not n["reservation"] for n in shown
            )

        wait_until("every node in inspect wait, none locked", parked)
        records = {n["uuid"]: _record(stack, n["uuid"]) for n in nodes}
        powered = [u for u, r in records.items() if r.power_on_at is None]
        turns = sorted((r.power_on_at, u) for u, r in records.items() if r.power_on_at)
        assert len(powered) == 1, records
        assert len(turns) == 2, records
        (_, aborted), (_, last) = turns

        assert provision(stack.client, aborted, "abort").status_code == 202
        failed = wait_for_state(stack.client, aborted, "inspect failed")
        assert _record(stack, aborted).state == ins.ERROR
        assert failed["reservation"] is None

        role = "inspection-timeouts"
        clock.advance(stack.settings.conductor.inspection.timeout + 1)
        wait_until(
            "the powered-on node to time out",
            lambda: (
                inspection_sweeps.time_out_inspections(term_of(stack.conductor, role)) == 0
                and get_node(stack.client, powered[0])["provision_state"] == "inspect failed"
            ),
        )
        assert get_node(stack.client, last)["provision_state"] == "inspect wait"
        assert _record(stack, last).state == ins.STARTING, "its wait is not timed out"

        # The turns come: the last node powers on into its ramdisk.
        clock.advance(2 * 3600)
        stack.conductor.ctx.waker.notify()
        wait_until(
            "the last node to power on",
            lambda: (
                _record(stack, last).state == ins.WAITING
                and get_node(stack.client, last)["power_state"] == "power on"
            ),
        )
    finally:
        stack.stop()


def test_the_inspector_api_aborts_a_node_waiting_for_its_turn_and_starts_it_again(
    sqlite_url: str,
) -> None:
    """As ironic-inspector's abort: the node waiting (unlocked) for its power-on turn is
    aborted, not refused as locked; started again, it waits for a turn again."""
    settings = test_settings(sqlite_url)
    settings.conductor.inspection.power_on_interval = 3600.0
    stack = start_stack(settings)
    inspector = TestClient(
        create_inspector_app(stack.app.state.services),
        headers={"X-OpenStack-Ironic-Inspector-API-Version": "1.18"},
    )
    try:
        first, second = (
            _manageable(stack, driver_info={"fake_step_delay": 7200}) for _ in range(2)
        )
        for node in (first, second):
            assert provision(stack.client, node["uuid"], "inspect").status_code == 202
        wait_until(
            "one node waiting for its turn",
            lambda: any(_record(stack, n["uuid"]).power_on_at for n in (first, second)),
        )
        waiting = next(n["uuid"] for n in (first, second) if _record(stack, n["uuid"]).power_on_at)
        wait_until(
            "it parked unlocked",
            lambda: (
                get_node(stack.client, waiting)["provision_state"] == "inspect wait"
                and not get_node(stack.client, waiting)["reservation"]
            ),
        )
        aborted = inspector.post(f"/v1/introspection/{waiting}/abort")
        assert aborted.status_code == 202, aborted.text
        wait_for_state(stack.client, waiting, "inspect failed")
        shown = inspector.get(f"/v1/introspection/{waiting}").json()
        assert shown["finished"] is True
        assert shown["state"] == "error"
        again = inspector.post(f"/v1/introspection/{waiting}")
        assert again.status_code == 202, again.text
        wait_until(
            "a new turn",
            lambda: (
                _record(stack, waiting).state == ins.STARTING
                and get_node(stack.client, waiting)["provision_state"] == "inspect wait"
            ),
        )
        assert inspector.get(f"/v1/introspection/{waiting}").json()["finished"] is False
    finally:
        stack.stop()


STOP_MARGIN = 8.0
"""Seconds before a waiting node's power-on turn that the stop test still stops in."""


def test_a_stopping_conductor_leaves_a_short_power_on_turn_wait_and_gives_the_node_back(
    sqlite_url: str,
) -> None:
    """A turn a few seconds away is waited for holding the node; a conductor told to stop
    leaves that wait at once and gives the node and its item back, the turn not taken."""
    settings = test_settings(sqlite_url)
    interval = 29.0  # within SHORT_TURN_WAIT
    settings.conductor.inspection.power_on_interval = interval
    stack = start_stack(settings)
    stopped = False
    try:
        nodes = [_manageable(stack, driver_info={"fake_step_delay": 7200}) for _ in range(2)]
        for node in nodes:
            assert provision(stack.client, node["uuid"], "inspect").status_code == 202

        def turn_far_enough() -> bool:
            """The second node's turn is still STOP_MARGIN seconds away: the stop comes
            while it waits, however slow this machine was to see it waiting."""
            with stack.db.read() as session:
                following = session.scalar(
                    select(Throttle.next_at).where(Throttle.name == throttle.POWER_ON)
                )
                now = now_for(session)
            if following is None:
                return False
            turn = following - dt.timedelta(seconds=interval)
            return (turn - now).total_seconds() >= STOP_MARGIN

        def holding_for_its_turn() -> str | None:
            if not turn_far_enough():
                return None
            for node in nodes:
                shown = get_node(stack.client, node["uuid"])
                record = _record(stack, node["uuid"])
                if (
                    shown["provision_state"] == "inspecting"
                    and shown["reservation"]
                    and record.power_on_at is None
                    and shown["power_state"] == "power off"
                    and any(
                        get_node(stack.client, n["uuid"])["power_state"] == "power on"
                        for n in nodes
                    )
                ):
                    return str(node["uuid"])
            return None

        waiting = wait_until("one node holding for its turn", holding_for_its_turn)
        assert stack.conductor.stop() is True, "every running item reached a safe point"
        stopped = True
        left = get_node(stack.client, waiting)
        assert left["reservation"] is None
        # Given back as it was, or parked for its turn (a slower machine may reach the
        # wait's write first): either way not powered on, and its work still queued.
        assert left["provision_state"] in ("inspecting", "inspect wait")
        assert left["power_state"] == "power off", "the turn was not waited out"
        with stack.db.read() as session:
            items = session.scalars(
                select(WorkItem).where(WorkItem.node_id == _node_id(stack, waiting))
            ).all()
        assert [i.state for i in items if i.state != queue.DONE] == [queue.PENDING]
    finally:
        if stopped:
            stack.close_client()
            stack.db.dispose()
        else:
            stack.stop()


def test_a_report_redelivered_while_processing_ends_in_error_saying_why(stack: Stack) -> None:
    """A worker that died while processing leaves the record ``processing``; the report
    delivered again finds it so (the seed's "déjà vu"): the record ends in error with
    the reason, the node in ``inspect failed``, and nothing is processed twice."""
    node = _manageable(stack, driver_info={"fake_step_delay": 3600})
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    wait_for_state(stack.client, node["uuid"], "inspect wait")
    record = _record(stack, node["uuid"])
    with stack.db.write() as session:
        introspections.save(session, record.moved(ins.PROCESSING))
        session.execute(
            update(Node).where(Node.uuid == node["uuid"]).values(provision_state="inspecting")
        )
    _queue_event(stack, node["uuid"], ins.CONTINUE, record.generation)
    wait_until("the redelivered report", lambda: _record(stack, node["uuid"]).state == ins.ERROR)
    error = _record(stack, node["uuid"]).error or ""
    assert "not processed twice" in error
    failed = wait_for_state(stack.client, node["uuid"], "inspect failed")
    assert "not processed twice" in failed["last_error"]
