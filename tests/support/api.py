"""Small helpers for driving the API in tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from metalforge.states import STABLE_STATES

LATEST = {"X-OpenStack-Ironic-API-Version": "latest"}


def version(v: str) -> dict[str, str]:
    return {"X-OpenStack-Ironic-API-Version": v}


def error_text(response: Any) -> str:
    """The ``faultstring`` of an Ironic-format error body."""
    inner = json.loads(response.json()["error_message"])
    return str(inner.get("faultstring") or inner.get("description"))


def create_node(client: TestClient, **fields: Any) -> dict[str, Any]:
    body = {"driver": "fake-hardware", **fields}
    response = client.post("/v1/nodes", json=body, headers=LATEST)
    assert response.status_code == 201, response.text
    node: dict[str, Any] = response.json()
    return node


def provision(client: TestClient, ident: str, target: str, **extra: Any) -> Any:
    return client.put(
        f"/v1/nodes/{ident}/states/provision", json={"target": target, **extra}, headers=LATEST
    )


def get_node(client: TestClient, ident: str) -> dict[str, Any]:
    response = client.get(f"/v1/nodes/{ident}", headers=LATEST)
    assert response.status_code == 200, response.text
    node: dict[str, Any] = response.json()
    return node


def wait_for_state(
    client: TestClient,
    ident: str,
    state: str,
    timeout: float = 20.0,
    *,
    field: str = "provision_state",
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    node = get_node(client, ident)
    while time.monotonic() < deadline:
        node = get_node(client, ident)
        settled = (
            field != "provision_state"
            or state not in STABLE_STATES
            or node["target_provision_state"] is None
        )
        if node[field] == state and settled:
            return node
        time.sleep(0.05)
    raise AssertionError(
        f"node {ident} did not reach {state}; it is {node[field]} "
        f"(last_error: {node.get('last_error')})"
    )


def wait_until(what: str, condition: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Until ``condition()`` is truthy; returns that value (fails naming ``what``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def bios_of(client: TestClient, ident: str) -> dict[str, Any]:
    """The node's BIOS settings, name to value (``GET /v1/nodes/{id}/bios``)."""
    response = client.get(f"/v1/nodes/{ident}/bios", headers=LATEST)
    assert response.status_code == 200, response.text
    return {s["name"]: s["value"] for s in response.json()["bios"]}


def make_available(client: TestClient, **fields: Any) -> dict[str, Any]:
    """Enroll a node and take it to ``available`` with a known power state."""
    node = create_node(client, **fields)
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    assert provision(client, node["uuid"], "provide").status_code == 202
    return wait_for_state(client, node["uuid"], "available")
