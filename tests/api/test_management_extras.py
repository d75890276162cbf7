"""Console, boot mode, secure boot, indicators and NMI through the API, on fake hardware."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.support.api import LATEST, create_node, error_text, get_node, version, wait_until
from tests.support.stack import Stack


def _console(client: TestClient, node: str) -> dict[str, Any]:
    response = client.get(f"/v1/nodes/{node}/states/console", headers=LATEST)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_console_is_started_and_stopped_by_the_conductor(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, driver="fake-hardware")["uuid"]
    assert _console(client, node) == {"console_enabled": False, "console_info": None}

    response = client.put(
        f"/v1/nodes/{node}/states/console", json={"enabled": True}, headers=LATEST
    )
    assert response.status_code == 202, response.text
    assert response.headers["Location"].endswith(f"/v1/nodes/{node}/states/console")
    wait_until("the console", lambda: get_node(client, node)["console_enabled"])
    assert _console(client, node) == {"console_enabled": True, "console_info": {}}
    # The path Ironic's router serves too (tempest reads it).
    also = client.get(f"/v1/nodes/states/console/{node}", headers=version("1.1"))
    assert also.json() == {"console_enabled": True, "console_info": {}}
    assert "fake_console_started_at" in get_node(client, node)["driver_internal_info"]

    response = client.put(
        f"/v1/nodes/{node}/states/console", json={"enabled": False}, headers=LATEST
    )
    assert response.status_code == 202, response.text
    wait_until("the console off", lambda: not get_node(client, node)["console_enabled"])
    assert "fake_console_started_at" not in get_node(client, node)["driver_internal_info"]


def test_console_refusals(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, driver="fake-hardware", console_interface="no-console")["uuid"]
    response = client.put(
        f"/v1/nodes/{node}/states/console", json={"enabled": True}, headers=LATEST
    )
    assert response.status_code == 400
    assert error_text(response) == (
        "Driver fake-hardware does not support console (disabled or not implemented)."
    )
    assert _console(client, node)["console_enabled"] is False
    for body in ({}, {"enabled": "maybe"}, {"enabled": True, "other": 1}):
        response = client.put(f"/v1/nodes/{node}/states/console", json=body, headers=LATEST)
        assert response.status_code == 400, body


def test_console_failure_is_the_last_error(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(
        client, driver="fake-hardware", driver_info={"fake_fail_steps": "console.start_console"}
    )["uuid"]
    response = client.put(
        f"/v1/nodes/{node}/states/console", json={"enabled": True}, headers=LATEST
    )
    assert response.status_code == 202
    error = wait_until("the failure", lambda: get_node(client, node)["last_error"])
    assert error.startswith(f"Error enabling the console on node {node}. Reason: ")
    assert get_node(client, node)["console_enabled"] is False


def test_boot_mode_and_secure_boot(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, driver="fake-hardware")["uuid"]
    response = client.put(
        f"/v1/nodes/{node}/states/boot_mode", json={"target": "bios"}, headers=LATEST
    )
    assert response.status_code == 202, response.text
    assert response.headers["Location"].endswith(f"/v1/nodes/{node}/states")
    wait_until("bios", lambda: get_node(client, node)["boot_mode"] == "bios")

    response = client.put(
        f"/v1/nodes/{node}/states/secure_boot", json={"target": True}, headers=LATEST
    )
    assert response.status_code == 202, response.text
    wait_until("secure boot", lambda: get_node(client, node)["secure_boot"] is True)
    states = client.get(f"/v1/nodes/{node}/states", headers=LATEST).json()
    assert (states["boot_mode"], states["secure_boot"]) == ("bios", True)


def test_boot_mode_refusals(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, driver="fake-hardware")["uuid"]
    path = f"/v1/nodes/{node}/states/boot_mode"
    old = client.put(path, json={"target": "uefi"}, headers=version("1.75"))
    assert old.status_code == 404
    assert error_text(old) == "This endpoint is supported starting with the API version 1.76"
    bad = client.put(path, json={"target": "efi"}, headers=LATEST)
    assert bad.status_code == 400
    assert error_text(bad) == (
        "Invalid boot mode efi requested for node. Allowed boot modes are: uefi, bios"
    )
    none = client.put(f"/v1/nodes/{node}/states/secure_boot", json={"target": None}, headers=LATEST)
    assert none.status_code == 400
    assert "Invalid secure_boot None" in error_text(none)
    assert client.put(path, json={}, headers=LATEST).status_code == 400


def test_boot_mode_failure_is_the_last_error(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(
        client,
        driver="fake-hardware",
        driver_info={"fake_fail_steps": "management.set_boot_mode"},
    )["uuid"]
    response = client.put(
        f"/v1/nodes/{node}/states/boot_mode", json={"target": "bios"}, headers=LATEST
    )
    assert response.status_code == 202
    error = wait_until("the failure", lambda: get_node(client, node)["last_error"])
    assert error.startswith("Failed to change boot mode to 'bios': ")
    assert get_node(client, node)["boot_mode"] != "bios"


def test_indicators(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, driver="fake-hardware")["uuid"]
    base = f"/v1/nodes/{node}/management/indicators"
    listed = client.get(base, headers=version("1.1"))
    assert listed.status_code == 200, listed.text
    by_name = {i["name"]: i for i in listed.json()["indicators"]}
    assert set(by_name) == {"led-0@chassis", "led@system"}
    assert by_name["led@system"]["component"] == "system"
    assert by_name["led@system"]["readonly"] is False
    assert by_name["led@system"]["states"] == ["blinking", "off", "on"]
    assert by_name["led-0@chassis"]["readonly"] is True
    assert by_name["led@system"]["links"][0]["href"].endswith(f"{base}/led@system")

    assert client.get(f"{base}/led@system", headers=LATEST).json() == {"state": "on"}
    response = client.put(f"{base}/led@system", json={"state": "BLINKING"}, headers=LATEST)
    assert response.status_code == 204, response.text
    assert client.get(f"{base}/led@system", headers=LATEST).json() == {"state": "blinking"}

    read_only = client.put(f"{base}/led-0@chassis", json={"state": "off"}, headers=LATEST)
    assert read_only.status_code == 400
    assert "read-only" in error_text(read_only)
    dim = client.put(f"{base}/led@system", json={"state": "dim"}, headers=LATEST)
    assert dim.status_code == 400
    malformed = client.get(f"{base}/led", headers=LATEST)
    assert malformed.status_code == 400
    assert error_text(malformed) == 'Malformed indicator name "led"'
    unknown = client.get(f"{base}/led@disk", headers=LATEST)
    assert unknown.status_code == 400
    assert "Invalid component disk specified." in error_text(unknown)


def test_inject_nmi(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, driver="fake-hardware")["uuid"]
    path = f"/v1/nodes/{node}/management/inject_nmi"
    assert client.put(path, json={}, headers=version("1.28")).status_code == 404
    response = client.put(path, json={}, headers=version("1.29"))
    assert response.status_code == 204, response.text
    assert "fake_nmi_injected_at" in get_node(client, node)["driver_internal_info"]
    assert get_node(client, node)["reservation"] is None
