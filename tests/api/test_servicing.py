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
