"""``/v1/nodes/{id}/firmware`` and the ``firmware.update`` step, on fake-hardware.

The Redfish emulator's UpdateService is in tests/drivers/test_redfish.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    get_node,
    provision,
    version,
    wait_for_state,
)
from tests.support.stack import Stack


def _manageable(client: TestClient) -> str:
    node = create_node(client)
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    return str(node["uuid"])


def _update(*settings: dict[str, Any]) -> dict[str, Any]:
    return {"interface": "firmware", "step": "update", "args": {"settings": list(settings)}}


def _firmware(client: TestClient, uuid: str, headers: dict[str, str] = LATEST) -> Any:
    response = client.get(f"/v1/nodes/{uuid}/firmware", headers=headers)
    assert response.status_code == 200, response.text
    return {c["component"]: c for c in response.json()["firmware"]}


def test_an_update_records_the_versions_before_and_after(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    uuid = _manageable(client)
    assert _firmware(client, uuid) == {}
    step = _update({"component": "bios", "url": "http://images.example.com/bios.bin"})
    assert provision(client, uuid, "clean", clean_steps=[step]).status_code == 202
    assert wait_for_state(client, uuid, "manageable")["last_error"] is None
    found = _firmware(client, uuid)
    bios, bmc = found["bios"], found["bmc"]
    assert (bios["initial_version"], bios["current_version"]) == ("1.0.0", "1.0.1")
    assert bios["last_version_flashed"] == "1.0.1"
    assert (bmc["initial_version"], bmc["current_version"]) == ("1.0.0", "1.0.0")
    assert bmc["last_version_flashed"] is None
    assert (bios["vendor"], bios["model"], bios["serial_number"]) == ("fake", "fake-hardware", None)
    older = _firmware(client, uuid, version("1.113"))["bios"]
    assert set(older) == {
        "component",
        "initial_version",
        "current_version",
        "last_version_flashed",
        "created_at",
        "updated_at",
    }

    step = _update(
        {"component": "bmc", "url": "https://images.example.com/bmc.bin", "wait": 0},
        {"component": "bios", "url": "http://images.example.com/bios2.bin"},
    )
    assert provision(client, uuid, "clean", clean_steps=[step]).status_code == 202
    wait_for_state(client, uuid, "manageable")
    found = _firmware(client, uuid)
    assert found["bios"]["initial_version"] == "1.0.0"
    assert found["bios"]["current_version"] == "1.0.2"
    assert found["bmc"]["last_version_flashed"] == "1.0.1"


@pytest.mark.parametrize(
    ("settings", "text"),
    [
        ([{"component": "nic:eth0", "url": "http://x/nic.bin"}], "component"),
        ([{"component": "bios", "url": "ftp://x/bios.bin"}], "http(s) URL"),
        ([{"component": "bios"}], "needs component and url"),
        ([{"component": "bios", "url": "http://x/b", "wait": -1}], "wait"),
        ([{"component": "bios", "url": "http://x/b", "colour": "red"}], "colour"),
        ([], "non-empty list"),
        ("bios=http://x", "non-empty list"),
    ],
)
def test_bad_updates_are_refused_before_the_node_moves(
    sqlite_stack: Stack, settings: Any, text: str
) -> None:
    client = sqlite_stack.client
    uuid = _manageable(client)
    step = {"interface": "firmware", "step": "update", "args": {"settings": settings}}
    response = provision(client, uuid, "clean", clean_steps=[step])
    assert response.status_code == 400, response.text
    assert text in error_text(response)
    assert get_node(client, uuid)["provision_state"] == "manageable"


def test_versions_and_fields(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    uuid = _manageable(client)
    old = client.get(f"/v1/nodes/{uuid}/firmware", headers=version("1.85"))
    assert old.status_code == 404
    identity = client.get(f"/v1/nodes/{uuid}/firmware?fields=vendor", headers=version("1.113"))
    assert identity.status_code == 406
    both = client.get(f"/v1/nodes/{uuid}/firmware?fields=model&detail=true", headers=LATEST)
    assert both.status_code == 400
