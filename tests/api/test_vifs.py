"""VIFs: ``/v1/nodes/{node}/vifs``, recorded on a free port or port group as Ironic chooses
(the ``flat`` network interface); accepted and not recorded with ``noop``, the default."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient

from tests.support.api import LATEST, error_text, version
from tests.support.stack import Stack

FLAT_NODE = {"driver": "fake-hardware", "network_interface": "flat"}


def _post(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body, headers=LATEST)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _vifs(client: TestClient, node: str) -> list[str]:
    response = client.get(f"/v1/nodes/{node}/vifs", headers=LATEST)
    assert response.status_code == 200, response.text
    return [v["id"] for v in response.json()["vifs"]]


def _attach(client: TestClient, node: str, vif: str, **body: Any) -> Any:
    return client.post(f"/v1/nodes/{node}/vifs", json={"id": vif, **body}, headers=LATEST)


def test_attach_prefers_a_group_then_a_booting_port_and_detach_frees_it(stack: Stack) -> None:
    client = stack.client
    node = _post(client, "/v1/nodes", FLAT_NODE)["uuid"]
    quiet = _post(
        client,
        "/v1/ports",
        {"node_uuid": node, "address": "52:54:00:bb:00:01", "pxe_enabled": False},
    )
    booting = _post(client, "/v1/ports", {"node_uuid": node, "address": "52:54:00:bb:00:02"})
    group = _post(client, "/v1/portgroups", {"node_uuid": node})
    member = _post(
        client,
        "/v1/ports",
        {"node_uuid": node, "address": "52:54:00:bb:00:03", "portgroup_uuid": group["uuid"]},
    )
    first, second, third = (str(uuid.uuid4()) for _ in range(3))

    assert _attach(client, node, first).status_code == 204
    shown = client.get(f"/v1/portgroups/{group['uuid']}", headers=LATEST).json()
    assert shown["internal_info"] == {"tenant_vif_port_id": first}
    assert _attach(client, node, second).status_code == 204
    assert client.get(f"/v1/ports/{booting['uuid']}", headers=LATEST).json()["internal_info"] == {
        "tenant_vif_port_id": second
    }
    assert _attach(client, node, third).status_code == 204
    assert client.get(f"/v1/ports/{quiet['uuid']}", headers=LATEST).json()["internal_info"] == {
        "tenant_vif_port_id": third
    }
    assert sorted(_vifs(client, node)) == sorted([first, second, third])

    again = _attach(client, node, first)
    assert again.status_code == 409, again.text
    assert "already attached" in error_text(again)
    full = _attach(client, node, "tenant-net-4")
    assert full.status_code == 400, full.text
    assert "not enough free physical ports" in error_text(full)

    assert client.delete(f"/v1/nodes/{node}/vifs/{second}", headers=LATEST).status_code == 204
    assert client.get(f"/v1/ports/{booting['uuid']}", headers=LATEST).json()["internal_info"] == {}
    missing = client.delete(f"/v1/nodes/{node}/vifs/{second}", headers=LATEST)
    assert missing.status_code == 400, missing.text
    # A port carrying a VIF cannot join a group that forbids standalone ports.
    assert member["portgroup_uuid"] == group["uuid"]


def test_a_vif_may_name_its_port_from_1_67_and_bad_requests_change_nothing(
    sqlite_stack: Stack,
) -> None:
    client = sqlite_stack.client
    node = _post(client, "/v1/nodes", FLAT_NODE)["uuid"]
    one = _post(client, "/v1/ports", {"node_uuid": node, "address": "52:54:00:bb:01:01"})
    two = _post(client, "/v1/ports", {"node_uuid": node, "address": "52:54:00:bb:01:02"})
    vif = str(uuid.uuid4())
    old = client.post(
        f"/v1/nodes/{node}/vifs",
        json={"id": vif, "port_uuid": two["uuid"]},
        headers=version("1.66"),
    )
    assert old.status_code == 406, old.text
    both = _attach(client, node, vif, port_uuid=two["uuid"], portgroup_uuid=two["uuid"])
    assert both.status_code == 400, both.text
    for bad in ({"id": "bad name!"}, {"id": ""}, {"id": vif, "network": "x"}, {}):
        response = client.post(f"/v1/nodes/{node}/vifs", json=bad, headers=LATEST)
        assert response.status_code == 400, (bad, response.text)
    assert _vifs(client, node) == []
    assert _attach(client, node, vif, port_uuid=two["uuid"]).status_code == 204
    assert client.get(f"/v1/ports/{one['uuid']}", headers=LATEST).json()["internal_info"] == {}
    assert _vifs(client, node) == [vif]
    assert client.get(f"/v1/nodes/{node}/vifs", headers=version("1.27")).status_code == 404
    unknown = client.get(f"/v1/nodes/{uuid.uuid4()}/vifs", headers=LATEST)
    assert unknown.status_code == 404, unknown.text


def test_a_port_carrying_a_vif_does_not_join_a_group_without_standalone_ports(
    sqlite_stack: Stack,
) -> None:
    client = sqlite_stack.client
    node = _post(client, "/v1/nodes", FLAT_NODE)["uuid"]
    port = _post(
        client,
        "/v1/ports",
        {"node_uuid": node, "address": "52:54:00:bb:02:01", "pxe_enabled": False},
    )
    group = _post(
        client, "/v1/portgroups", {"node_uuid": node, "standalone_ports_supported": False}
    )
    vif = str(uuid.uuid4())
    assert _attach(client, node, vif).status_code == 204
    joined = client.patch(
        f"/v1/ports/{port['uuid']}",
        json=[{"op": "add", "path": "/portgroup_uuid", "value": group["uuid"]}],
        headers=LATEST,
    )
    assert joined.status_code == 409, joined.text
    assert f"VIF {vif} is attached" in error_text(joined)


def test_the_noop_network_accepts_attach_and_detach_and_lists_no_vif(stack: Stack) -> None:
    client = stack.client
    node = _post(client, "/v1/nodes", {"driver": "fake-hardware"})
    assert node["network_interface"] == "noop"
    port = _post(client, "/v1/ports", {"node_uuid": node["uuid"], "address": "52:54:00:bb:09:01"})
    vif = str(uuid.uuid4())
    assert _attach(client, node["uuid"], vif).status_code == 204
    assert _vifs(client, node["uuid"]) == []
    shown = client.get(f"/v1/ports/{port['uuid']}", headers=LATEST).json()
    assert shown["internal_info"] == {}, "noop records nothing"
    gone = client.delete(f"/v1/nodes/{node['uuid']}/vifs/{uuid.uuid4()}", headers=LATEST)
    assert gone.status_code == 204, "as Ironic's noop: detaching is accepted too"

    # A VIF an older release recorded on a noop node is forgotten when detached.
    legacy = str(uuid.uuid4())
    patch = [{"op": "add", "path": "/extra/vif_port_id", "value": legacy}]
    assert client.patch(f"/v1/ports/{port['uuid']}", json=patch, headers=LATEST).status_code == 200
    gone = client.delete(f"/v1/nodes/{node['uuid']}/vifs/{legacy}", headers=LATEST)
    assert gone.status_code == 204
    assert client.get(f"/v1/ports/{port['uuid']}", headers=LATEST).json()["extra"] == {}

    # Switched to flat, the node records and lists its VIFs.
    patch = [{"op": "replace", "path": "/network_interface", "value": "flat"}]
    changed = client.patch(f"/v1/nodes/{node['uuid']}", json=patch, headers=LATEST)
    assert changed.status_code == 200, changed.text
    assert _attach(client, node["uuid"], vif).status_code == 204
    assert _vifs(client, node["uuid"]) == [vif]
