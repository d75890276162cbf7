"""Port groups: the ``/v1/portgroups`` resource, ports' membership, and Ironic's rules.

Shape, gating and rules on SQLite; the fenced writes on both engines.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient

from tests.support.api import LATEST, error_text, provision, version, wait_for_state
from tests.support.stack import Stack


def _node(client: TestClient, **fields: Any) -> dict[str, Any]:
    response = client.post("/v1/nodes", json={"driver": "fake-hardware", **fields}, headers=LATEST)
    assert response.status_code == 201, response.text
    node: dict[str, Any] = response.json()
    return node


def _group(client: TestClient, node: str, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/portgroups", json={"node_uuid": node, **body}, headers=LATEST)
    assert response.status_code == 201, response.text
    group: dict[str, Any] = response.json()
    return group


def _port(client: TestClient, node: str, mac: str, **body: Any) -> Any:
    return client.post(
        "/v1/ports", json={"node_uuid": node, "address": mac, **body}, headers=LATEST
    )


def test_create_show_list_patch_delete(stack: Stack) -> None:
    client = stack.client
    node = _node(client, name="pg-node")
    group = _group(client, node["uuid"], address="52:54:00:AA:BB:01", name="bond0")
    assert group["address"] == "52:54:00:aa:bb:01"
    assert group["mode"] == "active-backup"  # the configured default
    assert (group["standalone_ports_supported"], group["properties"], group["extra"]) == (
        True,
        {},
        {},
    )
    assert group["node_uuid"] == node["uuid"]
    assert group["dynamic_portgroup"] is False
    base = "http://testserver"
    assert group["ports"] == [
        {"href": f"{base}/v1/portgroups/{group['uuid']}/ports", "rel": "self"},
        {"href": f"{base}/portgroups/{group['uuid']}/ports", "rel": "bookmark"},
    ]

    by_name = client.get("/v1/portgroups/bond0", headers=LATEST).json()
    assert by_name["uuid"] == group["uuid"]
    listed = client.get("/v1/portgroups", headers=LATEST).json()["portgroups"]
    assert [set(g) for g in listed] == [{"uuid", "address", "name", "links"}]
    of_node = client.get("/v1/nodes/pg-node/portgroups/detail", headers=LATEST).json()
    assert [g["uuid"] for g in of_node["portgroups"]] == [group["uuid"]]
    by_address = client.get("/v1/portgroups?address=52:54:00:aa:bb:01", headers=LATEST).json()
    assert [g["uuid"] for g in by_address["portgroups"]] == [group["uuid"]]
    both = client.get(f"/v1/portgroups?node={node['uuid']}&address=x", headers=LATEST)
    assert both.status_code == 400, both.text

    member = _port(client, node["uuid"], "52:54:00:aa:bb:02", portgroup_uuid=group["uuid"])
    assert member.status_code == 201, member.text
    assert member.json()["portgroup_uuid"] == group["uuid"]
    members = client.get(f"/v1/portgroups/{group['uuid']}/ports", headers=LATEST).json()
    assert [p["uuid"] for p in members["ports"]] == [member.json()["uuid"]]
    filtered = client.get(f"/v1/ports?portgroup={group['uuid']}", headers=LATEST).json()
    assert [p["uuid"] for p in filtered["ports"]] == [member.json()["uuid"]]

    patched = client.patch(
        f"/v1/portgroups/{group['uuid']}",
        json=[
            {"op": "replace", "path": "/mode", "value": "802.3ad"},
            {"op": "add", "path": "/properties/miimon", "value": "100"},
            {"op": "add", "path": "/extra/rack", "value": "7"},
        ],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["mode"], patched.json()["properties"]) == ("802.3ad", {"miimon": "100"})

    # A group with member ports is not deleted; once empty it is.
    full = client.delete(f"/v1/portgroups/{group['uuid']}", headers=LATEST)
    assert full.status_code == 400, full.text
    assert "contains ports" in error_text(full)
    left = client.patch(
        f"/v1/ports/{member.json()['uuid']}",
        json=[{"op": "remove", "path": "/portgroup_uuid"}],
        headers=LATEST,
    )
    assert left.status_code == 200, left.text
    assert left.json()["portgroup_uuid"] is None
    assert client.delete(f"/v1/portgroups/{group['uuid']}", headers=LATEST).status_code == 204
    assert client.get(f"/v1/portgroups/{group['uuid']}", headers=LATEST).status_code == 404


def test_bad_input_is_refused_and_changes_nothing(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = _node(client)
    group = _group(client, node["uuid"], address="52:54:00:aa:cc:01", name="bond1")
    missing = str(uuid.uuid4())
    for body, status in (
        ({"node_uuid": missing}, 400),
        ({"node_uuid": node["uuid"], "address": "not-a-mac"}, 400),
        ({"node_uuid": node["uuid"], "name": "bad name"}, 400),
        ({"node_uuid": node["uuid"], "standalone_ports_supported": "maybe"}, 400),
        ({"node_uuid": node["uuid"], "category": "x" * 81}, 400),
        ({"node_uuid": node["uuid"], "address": "52:54:00:aa:cc:01"}, 409),
        ({"node_uuid": node["uuid"], "name": "bond1"}, 409),
        ({"address": "52:54:00:aa:cc:09"}, 400),
    ):
        response = client.post("/v1/portgroups", json=body, headers=LATEST)
        assert response.status_code == status, (body, response.text)
    for patch in (
        [{"op": "remove", "path": "/mode"}],
        [{"op": "replace", "path": "/uuid", "value": missing}],
        [{"op": "replace", "path": "/node_uuid", "value": missing}],
        [{"op": "replace", "path": "/internal_info", "value": {}}],
    ):
        response = client.patch(f"/v1/portgroups/{group['uuid']}", json=patch, headers=LATEST)
        assert response.status_code == 400, (patch, response.text)
    assert client.get(f"/v1/portgroups/{group['uuid']}", headers=LATEST).json() == group
    assert len(client.get("/v1/portgroups", headers=LATEST).json()["portgroups"]) == 1


def test_version_gates(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = _node(client)
    group = _group(client, node["uuid"])
    assert client.get("/v1/portgroups", headers=version("1.22")).status_code == 404
    old = client.get(f"/v1/portgroups/{group['uuid']}", headers=version("1.25")).json()
    assert "mode" not in old
    assert "properties" not in old
    assert (
        client.get(f"/v1/nodes/{node['uuid']}/portgroups", headers=version("1.23")).status_code
        == 404
    )
    refused = client.post(
        "/v1/portgroups",
        json={"node_uuid": node["uuid"], "mode": "balance-rr"},
        headers=version("1.25"),
    )
    assert refused.status_code == 406, refused.text
    shown = client.get(f"/v1/portgroups/{group['uuid']}.json", headers=version("1.90"))
    assert shown.status_code == 200, shown.text
    gone = client.get(f"/v1/portgroups/{group['uuid']}.json", headers=version("1.91"))
    assert gone.status_code == 404, gone.text


def test_membership_rules(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node, other = _node(client), _node(client)
    strict = _group(client, node["uuid"], standalone_ports_supported=False)
    foreign = _group(client, other["uuid"])
    booting = _port(client, node["uuid"], "52:54:00:aa:dd:01", portgroup_uuid=strict["uuid"])
    assert booting.status_code == 409, booting.text
    assert "doesn't support standalone ports" in error_text(booting)
    wrong_node = _port(client, node["uuid"], "52:54:00:aa:dd:02", portgroup_uuid=foreign["uuid"])
    assert wrong_node.status_code == 400, wrong_node.text
    member = _port(
        client,
        node["uuid"],
        "52:54:00:aa:dd:03",
        portgroup_uuid=strict["uuid"],
        pxe_enabled=False,
        physical_network="physnet1",
    )
    assert member.status_code == 201, member.text
    other_net = _port(
        client,
        node["uuid"],
        "52:54:00:aa:dd:04",
        portgroup_uuid=strict["uuid"],
        pxe_enabled=False,
        physical_network="physnet2",
    )
    assert other_net.status_code == 409, other_net.text
    loose = _group(client, node["uuid"])
    booting_member = _port(client, node["uuid"], "52:54:00:aa:dd:05", portgroup_uuid=loose["uuid"])
    assert booting_member.status_code == 201, booting_member.text
    tighten = client.patch(
        f"/v1/portgroups/{loose['uuid']}",
        json=[{"op": "replace", "path": "/standalone_ports_supported", "value": False}],
        headers=LATEST,
    )
    assert tighten.status_code == 409, tighten.text
    # A group with members does not move to another node.
    move = client.patch(
        f"/v1/portgroups/{loose['uuid']}",
        json=[{"op": "replace", "path": "/node_uuid", "value": other["uuid"]}],
        headers=LATEST,
    )
    assert move.status_code == 400, move.text


def test_deleting_a_node_deletes_its_groups_and_an_active_node_keeps_its_members(
    sqlite_stack: Stack,
) -> None:
    client = sqlite_stack.client
    node = _node(client)
    group = _group(client, node["uuid"])
    port = _port(client, node["uuid"], "52:54:00:aa:ee:01").json()
    provision(client, node["uuid"], "manage")
    wait_for_state(client, node["uuid"], "manageable")
    provision(client, node["uuid"], "provide")
    wait_for_state(client, node["uuid"], "available")
    joined = client.patch(
        f"/v1/ports/{port['uuid']}",
        json=[{"op": "add", "path": "/portgroup_uuid", "value": group["uuid"]}],
        headers=LATEST,
    )
    assert joined.status_code == 409, joined.text  # connectivity changes only while manageable
    assert client.delete(f"/v1/nodes/{node['uuid']}", headers=LATEST).status_code == 204
    assert client.get(f"/v1/portgroups/{group['uuid']}", headers=LATEST).status_code == 404


def test_ports_say_whether_they_may_join_a_dynamic_group_from_1_111(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = _node(client)
    port = _port(client, node["uuid"], "52:54:00:aa:ff:01").json()
    assert port["available_for_dynamic_portgroup"] is True
    old = client.get(f"/v1/ports/{port['uuid']}", headers=version("1.110")).json()
    assert "available_for_dynamic_portgroup" not in old
    refused = client.post(
        "/v1/ports",
        json={
            "node_uuid": node["uuid"],
            "address": "52:54:00:aa:ff:02",
            "available_for_dynamic_portgroup": False,
        },
        headers=version("1.110"),
    )
    assert refused.status_code == 406, refused.text
    patched = client.patch(
        f"/v1/ports/{port['uuid']}",
        json=[{"op": "replace", "path": "/available_for_dynamic_portgroup", "value": False}],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["available_for_dynamic_portgroup"] is False
