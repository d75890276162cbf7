"""The ``.json`` suffix: up to 1.90 a path's ``.json`` is dropped, and a resource not
found by the shortened name is looked for by its whole one; from 1.91 it is part of
the name, as in Ironic."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.support.api import LATEST, version
from tests.support.stack import Stack

OLD, NEW = version("1.90"), version("1.91")


def _made(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body, headers=LATEST)
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


def _name(client: TestClient, path: str, headers: dict[str, str]) -> Any:
    response = client.get(path, headers=headers)
    return response.json()["name"] if response.status_code == 200 else response.status_code


def test_nodes_found_by_the_shortened_name_then_by_the_whole_one(stack: Stack) -> None:
    client = stack.client
    web = _made(client, "/v1/nodes", {"driver": "fake-hardware", "name": "web"})
    _made(client, "/v1/nodes", {"driver": "fake-hardware", "name": "web.json"})
    _made(client, "/v1/nodes", {"driver": "fake-hardware", "name": "db.json"})
    # Up to 1.90: the shortened name first, then the whole one.
    assert _name(client, "/v1/nodes/web.json", OLD) == "web"
    assert _name(client, "/v1/nodes/db.json", OLD) == "db.json"
    assert _name(client, f"/v1/nodes/{web['uuid']}.json", OLD) == "web"
    states = client.get("/v1/nodes/db.json/states", headers=OLD)
    assert states.status_code == 200, states.text
    # From 1.91, and with no version named: the name as written.
    assert _name(client, "/v1/nodes/web.json", NEW) == "web.json"
    assert _name(client, "/v1/nodes/db", NEW) == 404
    assert _name(client, f"/v1/nodes/{web['uuid']}.json", NEW) == 404
    assert _name(client, f"/v1/nodes/{web['uuid']}.json", {}) == 404
    missing = client.get("/v1/nodes/nothing.json", headers=OLD)
    assert missing.status_code == 404
    assert "nothing.json" in missing.text


def test_port_groups_and_allocations_too(stack: Stack) -> None:
    client = stack.client
    node = _made(client, "/v1/nodes", {"driver": "fake-hardware"})
    _made(client, "/v1/portgroups", {"node_uuid": node["uuid"], "name": "bond0.json"})
    _made(client, "/v1/allocations", {"resource_class": "none-here", "name": "job.json"})
    assert _name(client, "/v1/portgroups/bond0.json", OLD) == "bond0.json"
    assert _name(client, "/v1/allocations/job.json", OLD) == "job.json"
    assert _name(client, "/v1/portgroups/bond1.json", OLD) == 404
