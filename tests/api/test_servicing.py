"""Servicing (``service`` on an active node) with service steps, on fake-hardware.

Service steps are declared as such (``@service_step``), not clean steps
reused: a disk-erasing clean step must never run on a deployed node.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.support.api import (
    LATEST,
    error_text,
    get_node,
    make_available,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.stack import Stack


def _active(client: TestClient) -> str:
    node = make_available(client)
    assert provision(client, node["uuid"], "active").status_code == 202
    wait_for_state(client, node["uuid"], "active")
    return str(node["uuid"])


def _catalogue(client: TestClient, uuid: str) -> dict[str, dict[str, Any]]:
    response = client.get(f"/v1/nodes/{uuid}/servicing/steps", headers=LATEST)
    assert response.status_code == 200, response.text
    return {f"{s['interface']}.{s['step']}": s for s in response.json()["steps"]}


def test_the_catalogue_lists_service_steps_only(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    uuid = _active(client)
    found = _catalogue(client, uuid)
    assert {
        "bios.apply_configuration",
        "firmware.update",
        "management.reset_bios",
        "raid.create_configuration",
        "raid.delete_configuration",
    } <= set(found)
    assert "deploy.erase_devices" not in found
    assert "deploy.erase_devices_metadata" not in found
    assert found["firmware.update"]["args"][0]["name"] == "settings"


def test_a_clean_only_step_is_refused_on_a_deployed_node(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    uuid = _active(client)
    erase = {"interface": "deploy", "step": "erase_devices_metadata"}
    response = provision(client, uuid, "service", service_steps=[erase])
    assert response.status_code == 400, response.text
    assert "erase_devices_metadata" in error_text(response)
    assert get_node(client, uuid)["provision_state"] == "active"


def test_a_firmware_update_services_a_deployed_node_and_returns_it(stack: Stack) -> None:
    client = stack.client
    uuid = _active(client)
    instance = get_node(client, uuid)["instance_info"]
    update = {
        "interface": "firmware",
        "step": "update",
        "args": {"settings": [{"component": "bmc", "url": "https://fw.example.com/bmc.bin"}]},
    }
    reset = {"interface": "management", "step": "reset_bios"}
    assert provision(client, uuid, "service", service_steps=[update, reset]).status_code == 202
    done = wait_for_state(client, uuid, "active")
    assert done["last_error"] is None
    assert done["instance_info"] == instance
    assert done["service_step"] == {}
    firmware = client.get(f"/v1/nodes/{uuid}/firmware", headers=LATEST).json()["firmware"]
    bmc = next(c for c in firmware if c["component"] == "bmc")
    assert (bmc["initial_version"], bmc["last_version_flashed"]) == ("1.0.0", "1.0.1")
    history = client.get(f"/v1/nodes/{uuid}/history?detail=true", headers=LATEST).json()
    started = [
        e["event"].split(" ")[0]
        for e in history["history"]
        if e["event_type"] == "service_step" and " started" in e["event"]
    ]
    assert started == ["firmware.update", "management.reset_bios"]


RAID = {"logical_disks": [{"raid_level": "1", "size_gb": 100, "is_root_volume": True}]}
CREATE_RAID = {"interface": "raid", "step": "create_configuration"}


def _history_events(client: TestClient, uuid: str) -> list[str]:
    answer = client.get(f"/v1/nodes/{uuid}/history?detail=true", headers=LATEST).json()
    return [str(e["event"]) for e in answer["history"]]


def _slow_raid_service(client: TestClient, delay: float) -> str:
    """An active node servicing a non-abortable asynchronous step of ``delay`` seconds."""
    uuid = _active(client)
    patch = [{"op": "add", "path": "/driver_info/fake_step_delay", "value": delay}]
    assert client.patch(f"/v1/nodes/{uuid}", json=patch, headers=LATEST).status_code == 200
    raid = client.put(f"/v1/nodes/{uuid}/states/raid", json=RAID, headers=LATEST)
    assert raid.status_code == 204, raid.text
    assert provision(client, uuid, "service", service_steps=[CREATE_RAID]).status_code == 202
    wait_for_state(client, uuid, "service wait")
    return uuid


def test_abort_in_service_wait_returns_the_node_to_active(stack: Stack) -> None:
    """As Ironic's abort: through ``service failed`` to ``active``, the step let finish
    first when it cannot be interrupted."""
    client = stack.client
    uuid = _slow_raid_service(client, delay=2)
    assert provision(client, uuid, "abort").status_code == 202
    wait_until(
        "abort_after to be recorded",
        lambda: bool(get_node(client, uuid)["service_step"].get("abort_after")),
    )
    node = wait_for_state(client, uuid, "active")
    assert node["service_step"] == {}
    assert "after the non-abortable step finished" in node["last_error"]
    assert len(node["raid_config"]["logical_disks"]) == 1, "the step ran to its end"
    events = _history_events(client, uuid)
    assert any("service wait -> service failed" in e for e in events), events
    assert any("service failed -> active" in e for e in events), events
    progress = client.get(f"/v1/nodes/{uuid}/progress", headers=LATEST).json()
    assert not progress.get("flow"), "nothing of the aborted servicing is kept"


def test_abort_in_service_failed_returns_the_node_to_active(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    uuid = _active(client)
    reset = {"interface": "management", "step": "reset_bios"}
    fail = [{"op": "add", "path": "/driver_info/fake_fail_steps", "value": "management.reset_bios"}]
    assert client.patch(f"/v1/nodes/{uuid}", json=fail, headers=LATEST).status_code == 200
    assert provision(client, uuid, "service", service_steps=[reset]).status_code == 202
    failed = wait_for_state(client, uuid, "service failed")
    assert "management.reset_bios" in failed["last_error"]
    assert provision(client, uuid, "abort").status_code == 202
    node = wait_for_state(client, uuid, "active")
    assert "management.reset_bios" in node["last_error"], "the failure stays to be read"
    assert node["maintenance"] is False
