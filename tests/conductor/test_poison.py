"""One bad work item, step or release never stops the others, and nothing stays stuck.

A hardware type whose steps raise what no driver should (``buggy-hardware``)
stands in for a bug in a driver; the work queue is fed payloads no writer of
ours produces today, the way an older release or a bug might have left them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import Table, delete, select, update

from metalforge import cli
from metalforge.conductor import node_work
from metalforge.conductor.task import NodeTask
from metalforge.db import queue
from metalforge.db.models import Allocation, FlowProgressRow, Node, WorkItem
from metalforge.drivers.base import DriverTask, StepOutcome
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.fake import FAKE_HARDWARE, FakeDeploy
from metalforge.drivers.hardware import DriverRegistry, HardwareType
from metalforge.drivers.step_declarations import clean_step
from metalforge.startup import StartupError
from tests.support.api import (
    LATEST,
    create_node,
    make_available,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.stack import Stack, start_stack, test_settings
from tests.support.work_items import insert_raw_item


class BuggyDeploy(FakeDeploy):
    """Fake deploy steps; those named in ``driver_info.buggy_steps`` divide by zero."""

    def run_step(self, task: DriverTask, method: str, args: dict[str, Any]) -> StepOutcome:
        if method in str(task.node.driver_info.get("buggy_steps", "")).split(","):
            return 1 // 0  # type: ignore[return-value]  # never returns: the bug raises
        return super().run_step(task, method, args)

    @clean_step(priority=0)
    def mistyped(self, task: DriverTask) -> None:
        """A bug inside the step that happens to be a ``TypeError``."""
        len(task)  # type: ignore[arg-type]

    @clean_step(priority=0, argsinfo={"level": {"description": "how thorough"}})
    def promises_more(self, task: DriverTask) -> None:
        """Declares an argument its method does not take: a bad declaration."""


BUGGY_HARDWARE = HardwareType(
    name="buggy-hardware", supported={**FAKE_HARDWARE.supported, "deploy": (BuggyDeploy,)}
)


@pytest.fixture
def buggy_stack(sqlite_url: str) -> Iterator[Stack]:
    registry = DriverRegistry([HARDWARE_TYPES["fake-hardware"], BUGGY_HARDWARE])
    running = start_stack(test_settings(sqlite_url), registry=registry)
    try:
        yield running
    finally:
        running.stop()


def _items(stack: Stack, node_uuid: str) -> list[WorkItem]:
    with stack.db.read() as session:
        node_id = session.scalar(select(Node.id).where(Node.uuid == node_uuid))
        return list(session.scalars(select(WorkItem).where(WorkItem.node_id == node_id)))


def test_an_unexpected_error_in_a_clean_step_fails_cleaning_once(buggy_stack: Stack) -> None:
    client = buggy_stack.client
    node = create_node(
        client, driver="buggy-hardware", driver_info={"buggy_steps": "erase_devices_metadata"}
    )
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    assert provision(client, node["uuid"], "provide").status_code == 202
    failed = wait_for_state(client, node["uuid"], "clean failed")
    assert failed["maintenance"] is True
    assert failed["clean_step"] == {}
    assert "Unexpected ZeroDivisionError during provision" in failed["last_error"]
    # Failed at once, not retried: the step ran one time.
    history = client.get(f"/v1/nodes/{node['uuid']}/history", headers=LATEST).json()["history"]
    started = [e for e in history if "erase_devices_metadata started" in e["event"]]
    assert len(started) == 1
    assert all(item.state != queue.PENDING for item in _items(buggy_stack, node["uuid"]))


def test_an_unexpected_error_in_a_deploy_step_fails_the_deploy(buggy_stack: Stack) -> None:
    client = buggy_stack.client
    node = make_available(client, driver="buggy-hardware")
    patched = client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[{"op": "add", "path": "/driver_info/buggy_steps", "value": "write_image"}],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    assert provision(client, node["uuid"], "active").status_code == 202
    failed = wait_for_state(client, node["uuid"], "deploy failed")
    assert failed["deploy_step"] == {}
    assert "Unexpected ZeroDivisionError" in failed["last_error"]
    assert failed["reservation"] is None


@pytest.mark.parametrize(
    ("step", "error"),
    [
        # Raised inside the step: the step's own failure, reported as the bug it is.
        ({"step": "mistyped"}, "Unexpected TypeError during provision: object of type"),
        # The call does not fit the method: refused before the step runs.
        (
            {"step": "promises_more", "args": {"level": 1}},
            "clean step deploy.promises_more failed: rejected its arguments:",
        ),
    ],
    ids=["inside-the-step", "the-call"],
)
def test_a_type_error_inside_a_step_is_not_a_refused_call(
    buggy_stack: Stack, step: dict[str, Any], error: str
) -> None:
    client = buggy_stack.client
    node = create_node(client, driver="buggy-hardware")
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    clean = [{"interface": "deploy", **step}]
    assert provision(client, node["uuid"], "clean", clean_steps=clean).status_code == 202
    failed = wait_for_state(client, node["uuid"], "clean failed")
    assert error in failed["last_error"], failed["last_error"]
    assert failed["reservation"] is None


def _insert_item(
    stack: Stack, kind: str, node_uuid: str, payload: str, *, failures: int = 0
) -> int:
    with stack.db.read() as session:
        node_id = session.scalar(select(Node.id).where(Node.uuid == node_uuid))
    item_id = insert_raw_item(stack.db, kind, node_id, payload, failures=failures)
    stack.conductor.ctx.waker.notify()
    return item_id


def _write_config(tmp_path: Path, stack: Stack) -> Path:
    config = tmp_path / "metalforge.toml"
    config.write_text(f'[database]\nurl = "{stack.settings.database.url}"\n')
    return config


def test_an_unreadable_request_is_dead_lettered_and_others_move(
    buggy_stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = buggy_stack.client
    poisoned = make_available(client, name="poisoned")
    healthy = make_available(client, name="healthy")
    dead_id = _insert_item(buggy_stack, "power", poisoned["uuid"], '{"target": ' + "[" * 50_000)
    assert (
        client.put(
            f"/v1/nodes/{healthy['uuid']}/states/power",
            json={"target": "power on"},
            headers=LATEST,
        ).status_code
        == 202
    )
    wait_for_state(client, healthy["uuid"], "power on", field="power_state")
    node = wait_for_state(client, poisoned["uuid"], "available")

    def gave_up() -> bool:
        reply = client.get(f"/v1/nodes/{poisoned['uuid']}", headers=LATEST).json()
        return "Gave up on the power request" in (reply["last_error"] or "")

    wait_until("the poisoned node's last_error", gave_up)
    assert node["reservation"] is None
    config = _write_config(tmp_path, buggy_stack)
    cli.main(["--config", str(config), "work", "list", "--dead"])
    listing = capsys.readouterr().out
    assert str(dead_id) in listing
    assert poisoned["uuid"] in listing
    assert "its request could not be read" in listing
    # No conductor may take the replayed item (and bury it again) before the second try.
    buggy_stack.conductor.stop()
    cli.main(["--config", str(config), "work", "replay", str(dead_id)])
    assert f"work item {dead_id} is queued again" in capsys.readouterr().out
    with pytest.raises(StartupError, match="is not dead-lettered"):
        cli.main(["--config", str(config), "work", "replay", str(dead_id)])


@pytest.mark.parametrize(
    "payload",
    ['{"target": 5}', '{"timeout": 3}', '{"target": "power on", "timeout": "soon"}', "[]"],
)
def test_a_payload_that_does_not_fit_its_kind_is_dead_lettered_before_it_runs(
    buggy_stack: Stack, payload: str
) -> None:
    """Valid JSON of the wrong shape (written by other code or an older version) fails the
    request it was for, as an unreadable one does, and never runs half-read."""
    client = buggy_stack.client
    node = make_available(client)
    item_id = _insert_item(buggy_stack, "power", node["uuid"], payload)

    def dead() -> WorkItem | None:
        with buggy_stack.db.read() as session:
            item = session.get(WorkItem, item_id)
            return item if item is not None and item.state == queue.DEAD else None

    item = wait_until("the item to be dead-lettered", dead)
    assert "its request could not be read" in (item.last_error or "")
    shown = client.get(f"/v1/nodes/{node['uuid']}", headers=LATEST).json()
    assert "Gave up on the power request" in shown["last_error"]
    assert shown["power_state"] == node["power_state"]
    assert shown["reservation"] is None


def test_an_item_past_its_failure_budget_fails_the_flow(buggy_stack: Stack) -> None:
    client = buggy_stack.client
    node = create_node(client)
    with buggy_stack.db.write() as session:
        session.execute(
            update(Node)
            .where(Node.uuid == node["uuid"])
            .values(provision_state="cleaning", target_provision_state="available")
        )
    _insert_item(buggy_stack, "provision", node["uuid"], "{}", failures=5)
    failed = wait_for_state(client, node["uuid"], "clean failed")
    assert failed["maintenance"] is True
    assert (
        "Gave up on the provision request: it failed 5 times (the limit is 5)"
        in (failed["last_error"])
    )
    [item] = _items(buggy_stack, node["uuid"])
    assert item.state == queue.DEAD


def test_an_allocation_past_its_failure_budget_ends_in_error(sqlite_url: str) -> None:
    stack = start_stack(test_settings(sqlite_url), start_conductor=False)
    try:
        response = stack.client.post(
            "/v1/allocations", json={"resource_class": "baremetal"}, headers=LATEST
        )
        assert response.status_code == 201, response.text
        uuid = response.json()["uuid"]
        with stack.db.write() as session:
            session.execute(update(WorkItem).values(failures=5))
        stack.conductor.start()

        def _ended() -> Allocation | None:
            with stack.db.read() as session:
                row = session.scalar(select(Allocation).where(Allocation.uuid == uuid))
                return row if row is not None and row.state != "allocating" else None

        ended = wait_until("the allocation to end", _ended)
        assert ended.state == "error"
        assert "it failed 5 times" in (ended.last_error or "")
    finally:
        stack.stop()


def test_an_allocation_item_that_names_no_allocation_is_dead_lettered(buggy_stack: Stack) -> None:
    item_id = insert_raw_item(buggy_stack.db, "allocation", None, '{"allocation_id": "x"}')
    buggy_stack.conductor.ctx.waker.notify()

    def buried() -> WorkItem | None:
        with buggy_stack.db.read() as session:
            item = session.get(WorkItem, item_id)
            return item if item is not None and item.state == queue.DEAD else None

    item = wait_until("the item to be dead-lettered", buried)
    assert item.last_error == "the allocation request names nothing to work on"


def test_a_failed_release_gives_the_reservation_back(
    buggy_stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = buggy_stack.client
    node = make_available(client)

    def unsavable(task: NodeTask, change: node_work.PowerChange) -> None:
        task.node.name = object()  # type: ignore[assignment]  # no database stores this

    broken = dataclasses.replace(node_work.POWER, run=unsavable)
    monkeypatch.setattr(node_work, "BY_KIND", {**node_work.BY_KIND, "power": broken})
    response = client.put(
        f"/v1/nodes/{node['uuid']}/states/power", json={"target": "power on"}, headers=LATEST
    )
    assert response.status_code == 202

    def _given_back() -> WorkItem | None:
        [item] = [i for i in _items(buggy_stack, node["uuid"]) if i.kind == "power"]
        return item if item.failures == 1 and item.state == queue.PENDING else None

    item = wait_until("the power item to come back with one failure", _given_back)
    assert item.last_error
    with buggy_stack.db.read() as session:
        assert session.scalar(select(Node.reservation).where(Node.uuid == node["uuid"])) is None
    assert not buggy_stack.conductor.ctx.leaked_reservations


def test_a_node_whose_record_cannot_be_read_is_released_and_its_item_dead_lettered(
    db_url: str,
) -> None:
    """The task is built after the reservation is taken: when building it fails (here a
    flow record no writer of ours produces), the reservation is given back at once,
    each attempt counts, and the item is dead-lettered at the limit with the reason on
    the node, which can then be repaired and deleted through the API."""
    running = start_stack(test_settings(db_url, work_item_max_failures=2))
    try:
        client = running.client
        node = create_node(client)
        with running.db.write() as session:
            node_id = session.scalar(select(Node.id).where(Node.uuid == node["uuid"]))
            session.execute(
                cast(Table, FlowProgressRow.__table__)
                .insert()
                .values(node_id=node_id, flow="clean", planned=True, plan=[], requested=5)
            )
        response = client.put(
            f"/v1/nodes/{node['uuid']}/states/power", json={"target": "power on"}, headers=LATEST
        )
        assert response.status_code == 202, response.text

        def buried() -> bool:
            with running.db.read() as session:
                item = session.scalars(select(WorkItem).where(WorkItem.node_id == node_id)).one()
                return item.state == queue.DEAD

        wait_until("the power item is dead-lettered", buried, timeout=30)
        shown = client.get(f"/v1/nodes/{node['uuid']}", headers=LATEST).json()
        assert shown["reservation"] is None
        assert "Gave up on the power request" in (shown["last_error"] or "")
        with running.db.write() as session:
            session.execute(delete(FlowProgressRow).where(FlowProgressRow.node_id == node_id))
        assert client.delete(f"/v1/nodes/{node['uuid']}", headers=LATEST).status_code == 204
    finally:
        running.stop()
