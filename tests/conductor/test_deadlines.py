"""A work item's call that outlives its deadline is abandoned: the node fails, the worker is free.

Two ways a call hangs: a driver step that blocks (``hanging-hardware``, a
stand-in for a driver stuck in I/O), and a real Redfish BMC address that
accepts connections and never answers.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest

from metalforge.conductor.context import AbandonedCalls
from metalforge.config import WorkDeadlines
from metalforge.drivers.base import DriverTask, StepOutcome
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.fake import FAKE_HARDWARE, FakeDeploy
from metalforge.drivers.hardware import DriverRegistry, HardwareType
from tests.support.api import (
    LATEST,
    create_node,
    get_node,
    make_available,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.stack import Stack, start_stack, test_settings

RELEASE = threading.Event()
"""Set to let every hanging step return (at the end of each test)."""


class HangingDeploy(FakeDeploy):
    """Fake deploy steps; those named in ``driver_info.hang_steps`` block until released,
    then change the node as a late call would."""

    def run_step(self, task: DriverTask, method: str, args: dict[str, Any]) -> StepOutcome:
        if method in str(task.node.driver_info.get("hang_steps", "")).split(","):
            RELEASE.wait(300)
            task.node.extra = {**task.node.extra, "late": True}
        return super().run_step(task, method, args)


HANGING_HARDWARE = HardwareType(
    name="hanging-hardware", supported={**FAKE_HARDWARE.supported, "deploy": (HangingDeploy,)}
)


@pytest.fixture
def stack(sqlite_url: str) -> Iterator[Stack]:
    RELEASE.clear()
    registry = DriverRegistry(
        [HARDWARE_TYPES["fake-hardware"], HARDWARE_TYPES["redfish"], HANGING_HARDWARE]
    )
    settings = test_settings(sqlite_url, workers=1, work_deadlines={"provision": 1.0, "power": 1.0})
    running = start_stack(settings, registry=registry)
    try:
        yield running
    finally:
        RELEASE.set()
        running.stop()


def _power(stack: Stack, uuid: str, target: str) -> None:
    response = stack.client.put(
        f"/v1/nodes/{uuid}/states/power", json={"target": target}, headers=LATEST
    )
    assert response.status_code == 202, response.text


def test_a_step_past_its_deadline_fails_cleaning_and_the_worker_goes_on(stack: Stack) -> None:
    client = stack.client
    node = create_node(
        client, driver="hanging-hardware", driver_info={"hang_steps": "erase_devices_metadata"}
    )
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    assert provision(client, node["uuid"], "provide").status_code == 202
    failed = wait_for_state(client, node["uuid"], "clean failed")
    assert "did not finish within its deadline of 1 s" in failed["last_error"]
    assert failed["reservation"] is None
    assert stack.conductor.ctx.abandoned.running() == [f"provision on node {node['uuid']}"]

    # The only worker is free: another node's work runs while the call still hangs.
    other = make_available(client)
    _power(stack, other["uuid"], "power on")
    wait_until(
        "the other node's power on",
        lambda: get_node(client, other["uuid"])["power_state"] == "power on",
    )

    # The call ends at last: it may write nothing, and it is no longer counted.
    RELEASE.set()
    wait_until("the call to end", lambda: not stack.conductor.ctx.abandoned.running())
    after = get_node(client, node["uuid"])
    assert after["provision_state"] == "clean failed"
    assert "late" not in after["extra"]
    # The node is the operator's again.
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    assert client.delete(f"/v1/nodes/{node['uuid']}", headers=LATEST).status_code == 204


class SilentBmc:
    """A TCP listener that accepts connections and never answers them."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        # shutdown, not just close: a thread blocked in accept() keeps a closed
        # listener accepting.
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._thread.join(10)
        for connection in self.accepted:
            connection.shutdown(socket.SHUT_RDWR)
            connection.close()


def test_a_bmc_that_never_answers_fails_the_power_request_at_its_deadline(
    stack: Stack,
) -> None:
    bmc = SilentBmc()
    try:
        node = create_node(
            stack.client,
            driver="redfish",
            driver_info={
                "redfish_address": f"http://127.0.0.1:{bmc.port}",
                "redfish_system_id": "/redfish/v1/Systems/1",
            },
        )
        _power(stack, node["uuid"], "power on")

        def failed() -> dict[str, Any] | None:
            current = get_node(stack.client, node["uuid"])
            return current if current["last_error"] else None

        current = wait_until("the power request to fail", failed, timeout=60)
        assert "power request did not finish within its deadline of 1 s" in current["last_error"]
        assert current["target_power_state"] is None
        assert current["reservation"] is None
        assert bmc.accepted  # the call really was waiting on the BMC
    finally:
        bmc.close()
    wait_until("the call to end", lambda: not stack.conductor.ctx.abandoned.running(), timeout=120)
    assert stack.client.delete(f"/v1/nodes/{node['uuid']}", headers=LATEST).status_code == 204


def test_too_many_abandoned_calls_stop_the_claiming(stack: Stack) -> None:
    dispatcher = stack.conductor.dispatcher
    hung = threading.Thread(target=RELEASE.wait, args=(300,), daemon=True)
    hung.start()
    stack.conductor.ctx.settings = stack.conductor.ctx.settings.model_copy(
        update={"max_abandoned_calls": 1}
    )
    stack.conductor.ctx.abandoned.add(hung, "power on node x")
    assert dispatcher.dispatch_once() == 0
    RELEASE.set()
    hung.join()
    assert stack.conductor.ctx.abandoned.running() == []


def test_abandoned_calls_forget_those_that_ended() -> None:
    calls = AbandonedCalls()
    done = threading.Thread(target=lambda: None)
    done.start()
    done.join()
    calls.add(done, "ended")
    assert calls.running() == []


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), 8 * 86400, "soon"])
def test_a_deadline_is_a_finite_positive_number_of_at_most_a_week(value: object) -> None:
    with pytest.raises(pydantic.ValidationError):
        WorkDeadlines.model_validate({"power": value})


def test_a_project_s_call_that_never_ends_holds_back_that_project_only(sqlite_url: str) -> None:
    """An abandoned call counts against its node's project's share of the workers, so the
    conductor goes on claiming every other project's work."""
    registry = DriverRegistry([HARDWARE_TYPES["fake-hardware"], HARDWARE_TYPES["redfish"]])
    settings = test_settings(
        sqlite_url, workers=2, workers_per_project=1, work_deadlines={"power": 1.0}
    )
    stack = start_stack(settings, registry=registry)
    bmc = SilentBmc()
    closed = False
    try:
        client = stack.client
        same = make_available(client, owner="p-slow")
        other = make_available(client, owner="p-other")
        silent = create_node(
            client,
            driver="redfish",
            owner="p-slow",
            driver_info={
                "redfish_address": f"http://127.0.0.1:{bmc.port}",
                "redfish_system_id": "/redfish/v1/Systems/1",
            },
        )
        _power(stack, silent["uuid"], "power on")
        wait_until(
            "the call abandoned", lambda: stack.conductor.ctx.abandoned.by_project()["p-slow"]
        )
        _power(stack, same["uuid"], "power on")
        _power(stack, other["uuid"], "power on")
        wait_until(
            "the other project's power on",
            lambda: get_node(client, other["uuid"])["power_state"] == "power on",
        )
        assert get_node(client, same["uuid"])["target_power_state"] == "power on"
        assert get_node(client, same["uuid"])["power_state"] == "power off"
        bmc.close()  # the call ends: the project has its share back
        closed = True
        wait_until(
            "the same project's power on",
            lambda: get_node(client, same["uuid"])["power_state"] == "power on",
            timeout=60,
        )
    finally:
        if not closed:
            bmc.close()
        stack.stop()


def test_the_deployments_own_nodes_are_not_held_to_a_projects_share(sqlite_url: str) -> None:
    """Nodes with neither owner nor lessee are the operator's, not a tenant's: a call of
    theirs that never ends does not hold back the operator's other nodes."""
    registry = DriverRegistry([HARDWARE_TYPES["fake-hardware"], HARDWARE_TYPES["redfish"]])
    settings = test_settings(
        sqlite_url, workers=3, workers_per_project=1, work_deadlines={"power": 1.0}
    )
    stack = start_stack(settings, registry=registry)
    bmc = SilentBmc()
    try:
        client = stack.client
        own = make_available(client)
        silent = create_node(
            client,
            driver="redfish",
            driver_info={
                "redfish_address": f"http://127.0.0.1:{bmc.port}",
                "redfish_system_id": "/redfish/v1/Systems/1",
            },
        )
        _power(stack, silent["uuid"], "power on")
        wait_until("the call abandoned", lambda: stack.conductor.ctx.abandoned.by_project()[""])
        _power(stack, own["uuid"], "power on")
        wait_until(
            "the operator's other node powered on",
            lambda: get_node(client, own["uuid"])["power_state"] == "power on",
        )
    finally:
        bmc.close()
        stack.stop()
