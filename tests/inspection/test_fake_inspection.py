"""Inspection of fake-hardware nodes through the Ironic API, end to end in one process."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from metalforge import inspection_states as ins
from metalforge.api.inspector.app import create_inspector_app
from metalforge.db import introspections
from metalforge.db.introspections import Record
from tests.support.api import (
    LATEST,
    create_node,
    get_node,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.stack import Stack


def _manageable(stack: Stack, **fields: Any) -> dict[str, Any]:
    node = create_node(stack.client, **fields)
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    return wait_for_state(stack.client, node["uuid"], "manageable")


def _ports(stack: Stack, uuid: str) -> list[dict[str, Any]]:
    response = stack.client.get(f"/v1/ports?node={uuid}&fields=address,pxe_enabled", headers=LATEST)
    assert response.status_code == 200, response.text
    return sorted(response.json()["ports"], key=lambda p: p["address"])


def test_inspect_fills_properties_and_creates_the_booting_port(stack: Stack) -> None:
    node = _manageable(stack)
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    done = wait_for_state(stack.client, node["uuid"], "manageable")
    assert done["last_error"] is None
    props = done["properties"]
    assert (props["cpus"], props["cpu_arch"], props["memory_mb"], props["local_gb"]) == (
        8,
        "x86_64",
        32768,
        400,
    )
    assert done["inspection_finished_at"] is not None
    ports = _ports(stack, node["uuid"])
    assert len(ports) == 1
    assert ports[0]["pxe_enabled"] is True
    assert done["power_state"] == "power off"
    inventory = stack.client.get(f"/v1/nodes/{node['uuid']}/inventory", headers=LATEST)
    assert inventory.status_code == 200, inventory.text
    body = inventory.json()
    assert body["inventory"]["cpu"]["count"] == 8
    assert body["plugin_data"]["macs"] == [ports[0]["address"]]


def _record(stack: Stack, uuid: str) -> Record | None:
    with stack.db.read() as session:
        return introspections.load(session, uuid)


def _history(stack: Stack, uuid: str) -> list[str]:
    response = stack.client.get(f"/v1/nodes/{uuid}/history", headers=LATEST)
    return [event["event"] for event in response.json()["history"]]


def test_a_failed_power_on_fails_the_inspection(stack: Stack) -> None:
    node = _manageable(stack, driver_info={"fake_fail_steps": "inspect.inspect_hardware"})
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    failed = wait_for_state(stack.client, node["uuid"], "inspect failed")
    assert "inspect.inspect_hardware" in failed["last_error"]
    record = _record(stack, node["uuid"])
    assert record is not None
    assert record.state == ins.ERROR
    assert record.finished
    assert "inspect.inspect_hardware" in (record.error or "")


def test_a_ramdisk_error_fails_the_inspection_and_powers_off(stack: Stack) -> None:
    node = _manageable(stack, driver_info={"fake_fail_steps": "inspect.report"})
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    failed = wait_for_state(stack.client, node["uuid"], "inspect failed")
    assert "the ramdisk reported an error" in failed["last_error"]
    assert failed["power_state"] == "power off"
    assert "cpus" not in failed["properties"]
    assert _ports(stack, node["uuid"]) == []
    # inspect failed -> inspect again works, and succeeds once the ramdisk is fixed
    fixed = stack.client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[{"op": "remove", "path": "/driver_info/fake_fail_steps"}],
        headers=LATEST,
    )
    assert fixed.status_code == 200, fixed.text
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    assert wait_for_state(stack.client, node["uuid"], "manageable")["properties"]["cpus"] == 8
    record = _record(stack, node["uuid"])
    assert record is not None
    assert (record.state, record.generation) == (ins.FINISHED, 2)


def test_the_node_waits_in_inspect_wait_until_the_ramdisk_reports(stack: Stack) -> None:
    node = _manageable(stack, driver_info={"fake_step_delay": 0.5})
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    waiting = wait_for_state(stack.client, node["uuid"], "inspect wait")
    assert waiting["power_state"] == "power on"
    record = _record(stack, node["uuid"])
    assert record is not None
    assert record.state in (ins.WAITING, ins.PROCESSING, ins.FINISHED)
    wait_for_state(stack.client, node["uuid"], "manageable")


def test_abort_in_inspect_wait_fails_it_and_the_late_report_is_not_processed(
    stack: Stack,
) -> None:
    node = _manageable(stack, driver_info={"fake_step_delay": 1.0})
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    wait_for_state(stack.client, node["uuid"], "inspect wait")
    assert provision(stack.client, node["uuid"], "abort").status_code == 202
    aborted = wait_for_state(stack.client, node["uuid"], "inspect failed")
    assert aborted["power_state"] == "power off"
    record = _record(stack, node["uuid"])
    assert record is not None
    assert (record.state, record.error) == (ins.ERROR, "Canceled by operator")
    # The simulated ramdisk still reports a second later: it is refused, not processed.
    wait_until(
        "the late report to be refused",
        lambda: any("not processed" in e for e in _history(stack, node["uuid"])),
    )
    after = get_node(stack.client, node["uuid"])
    assert after["provision_state"] == "inspect failed"
    assert "cpus" not in after["properties"]
    record = _record(stack, node["uuid"])
    assert record is not None
    assert record.error == "Canceled by operator"


def test_an_inspection_already_running_cannot_be_started_again(stack: Stack) -> None:
    node = _manageable(stack, driver_info={"fake_step_delay": 1.0})
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    wait_for_state(stack.client, node["uuid"], "inspect wait")
    again = provision(stack.client, node["uuid"], "inspect")
    assert again.status_code == 400
    wait_for_state(stack.client, node["uuid"], "manageable")


def test_the_inspector_api_starts_again_after_aborting_a_node_waiting_for_its_report(
    stack: Stack,
) -> None:
    """ironic-inspector answers a start after an abort in ``inspect wait`` with 202, and
    the node inspects again."""
    inspector = TestClient(
        create_inspector_app(stack.app.state.services),
        headers={"X-OpenStack-Ironic-Inspector-API-Version": "1.18"},
    )
    node = _manageable(stack, driver_info={"fake_step_delay": 3600})
    uuid = node["uuid"]
    assert inspector.post(f"/v1/introspection/{uuid}").status_code == 202
    wait_for_state(stack.client, uuid, "inspect wait")
    aborted = inspector.post(f"/v1/introspection/{uuid}/abort")
    assert aborted.status_code == 202, aborted.text
    wait_for_state(stack.client, uuid, "inspect failed")
    again = inspector.post(f"/v1/introspection/{uuid}")
    assert again.status_code == 202, again.text
    wait_for_state(stack.client, uuid, "inspect wait")
    assert inspector.get(f"/v1/introspection/{uuid}").json()["finished"] is False
