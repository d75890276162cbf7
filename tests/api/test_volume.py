"""Volume connectors and targets: ``/v1/volume`` and the lists under a node.

Shape, rules and version gates on SQLite; deletion with the node (one
transaction, explicit deletes beside the foreign key) on both engines.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from metalforge.api.volume_view import REDACTED
from metalforge.db.models import VolumeConnector, VolumeTarget
from metalforge.drivers.catalog import HARDWARE_TYPES
from tests.support.api import LATEST, create_node, error_text, provision, version, wait_for_state
from tests.support.auth import (
    ADMIN,
    LESSEE_ADMIN,
    LESSEE_MEMBER,
    OWNER_ADMIN,
    OWNER_MEMBER,
    basic_auth_settings,
)
from tests.support.stack import Stack, start_stack

BASE = "http://testserver"


def _connector(client: TestClient, node: str, **body: Any) -> dict[str, Any]:
    payload = {"node_uuid": node, "type": "iqn", "connector_id": f"iqn.{uuid.uuid4().hex}", **body}
    response = client.post("/v1/volume/connectors", json=payload, headers=LATEST)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _target(client: TestClient, node: str, boot_index: int, **body: Any) -> dict[str, Any]:
    payload = {
        "node_uuid": node,
        "volume_type": "iscsi",
        "volume_id": uuid.uuid4().hex[:20],
        "boot_index": boot_index,
        **body,
    }
    response = client.post("/v1/volume/targets", json=payload, headers=LATEST)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _power(client: TestClient, node: str, target: str) -> None:
    response = client.put(f"/v1/nodes/{node}/states/power", json={"target": target}, headers=LATEST)
    assert response.status_code == 202, response.text
    wait_for_state(client, node, target, field="power_state")


def test_connector_create_show_list_patch_delete(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, name="vol-1")["uuid"]
    chosen = str(uuid.uuid4())
    created = _connector(
        client, node, uuid=chosen, connector_id="iqn.2024-01.org:n1", extra={"a": 1}
    )
    links = [
        {"href": f"{BASE}/v1/volume/connectors/{chosen}", "rel": "self"},
        {"href": f"{BASE}/volume/connectors/{chosen}", "rel": "bookmark"},
    ]
    assert created == {
        "uuid": chosen,
        "node_uuid": node,
        "type": "iqn",
        "connector_id": "iqn.2024-01.org:n1",
        "extra": {"a": 1},
        "created_at": created["created_at"],
        "updated_at": None,
        "links": links,
    }
    assert client.get(f"/v1/volume/connectors/{chosen}", headers=LATEST).json() == created
    only = client.get(f"/v1/volume/connectors/{chosen}?fields=extra", headers=LATEST).json()
    assert only == {"extra": {"a": 1}, "links": links}

    listed = client.get("/v1/volume/connectors", headers=LATEST).json()
    default = {k: created[k] for k in ("uuid", "node_uuid", "type", "connector_id", "links")}
    assert listed == {"connectors": [default]}
    detail = client.get("/v1/volume/connectors?detail=true", headers=LATEST).json()
    assert detail == {"connectors": [created]}
    assert client.get("/v1/volume/connectors/detail", headers=LATEST).json() == detail
    for path in (
        f"/v1/volume/connectors?node={node}",
        "/v1/volume/connectors?node=vol-1",
        f"/v1/nodes/{node}/volume/connectors",
        "/v1/nodes/vol-1/volume/connectors",
    ):
        assert client.get(path, headers=LATEST).json() == listed, path
    other = create_node(client)["uuid"]
    assert client.get(f"/v1/nodes/{other}/volume/connectors", headers=LATEST).json() == {
        "connectors": []
    }

    _power(client, node, "power off")
    patched = client.patch(
        f"/v1/volume/connectors/{chosen}",
        json=[
            {"op": "replace", "path": "/connector_id", "value": "iqn.2024-01.org:n2"},
            {"op": "add", "path": "/extra/b", "value": 2},
            {"op": "remove", "path": "/extra/a"},
        ],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["connector_id"] == "iqn.2024-01.org:n2"
    assert patched.json()["extra"] == {"b": 2}
    assert patched.json()["updated_at"] is not None
    removed = client.patch(
        f"/v1/volume/connectors/{chosen}",
        json=[{"op": "remove", "path": "/extra"}],
        headers=LATEST,
    )
    assert removed.json()["extra"] == {}

    assert client.delete(f"/v1/volume/connectors/{chosen}", headers=LATEST).status_code == 204
    gone = client.get(f"/v1/volume/connectors/{chosen}", headers=LATEST)
    assert gone.status_code == 404
    assert f"Volume connector {chosen} could not be found." in error_text(gone)


def test_target_create_show_patch_and_properties(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    properties = {"target_iqn": "iqn.x", "auth_password": "s3cret"}
    created = _target(client, node, 0, volume_id="vol-a", properties=properties, extra={"e": 1})
    assert created["properties"] == {"target_iqn": "iqn.x", "auth_password": "******"}
    assert (created["boot_index"], created["volume_id"], created["volume_type"]) == (
        0,
        "vol-a",
        "iscsi",
    )
    assert set(created) == {
        "uuid",
        "node_uuid",
        "volume_type",
        "boot_index",
        "volume_id",
        "properties",
        "extra",
        "created_at",
        "updated_at",
        "links",
    }
    listed = client.get("/v1/volume/targets", headers=LATEST).json()["targets"]
    assert set(listed[0]) == {
        "uuid",
        "node_uuid",
        "volume_type",
        "boot_index",
        "volume_id",
        "links",
    }
    listed_here = client.get(f"/v1/nodes/{node}/volume/targets?detail=true", headers=LATEST)
    assert listed_here.json()["targets"][0]["properties"]["target_iqn"] == "iqn.x"

    _power(client, node, "power off")
    patched = client.patch(
        f"/v1/volume/targets/{created['uuid']}",
        json=[
            {"op": "replace", "path": "/boot_index", "value": 3},
            {"op": "replace", "path": "/properties", "value": None},
        ],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["boot_index"], patched.json()["properties"]) == (3, {})

    # The same volume may be a target at two boot indexes; a boot index is one node's once.
    _target(client, node, 4, volume_id="vol-a")
    taken = client.post(
        "/v1/volume/targets",
        json={"node_uuid": node, "volume_type": "iscsi", "volume_id": "v", "boot_index": 3},
        headers=LATEST,
    )
    assert taken.status_code == 409, taken.text
    assert "A volume target with boot index '3' for the same node already exists." in error_text(
        taken
    )
    elsewhere = create_node(client)["uuid"]
    _target(client, elsewhere, 3)
    moved_onto_taken = client.patch(
        f"/v1/volume/targets/{created['uuid']}",
        json=[{"op": "replace", "path": "/boot_index", "value": 4}],
        headers=LATEST,
    )
    assert moved_onto_taken.status_code == 409, moved_onto_taken.text


def test_connector_rules_and_bad_input(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    connector = _connector(client, node, type="wwpn", connector_id="50:00:00:00:00:00:00:01")
    duplicate = client.post(
        "/v1/volume/connectors",
        json={"node_uuid": node, "type": "wwpn", "connector_id": "50:00:00:00:00:00:00:01"},
        headers=LATEST,
    )
    assert duplicate.status_code == 409
    assert "A volume connector with type wwpn and connector ID" in error_text(duplicate)
    again = client.post(
        "/v1/volume/connectors",
        json={"node_uuid": node, "type": "iqn", "connector_id": "x", "uuid": connector["uuid"]},
        headers=LATEST,
    )
    assert again.status_code == 409
    assert f"A volume connector with UUID {connector['uuid']} already exists." in error_text(again)
    missing = str(uuid.uuid4())
    for body, text in (
        ({"node_uuid": node, "type": "nvme", "connector_id": "x"}, "Invalid value for type"),
        ({"node_uuid": node, "type": "iqn"}, "'connector_id' is a required property"),
        ({"node_uuid": node, "type": "iqn", "connector_id": 5}, "connector_id"),
        ({"node_uuid": node, "type": "iqn", "connector_id": "x", "name": "n"}, "'name'"),
        ({"node_uuid": "vol-1", "type": "iqn", "connector_id": "x"}, "Expected UUID"),
        ({"node_uuid": missing, "type": "iqn", "connector_id": "x"}, missing),
        ({"node_uuid": node, "type": "iqn", "connector_id": "x" * 256}, "at most 255"),
        ({"node_uuid": node, "type": "iqn", "connector_id": "x", "extra": []}, "extra"),
    ):
        response = client.post("/v1/volume/connectors", json=body, headers=LATEST)
        assert response.status_code == 400, (body, response.text)
        assert text in error_text(response), (body, error_text(response))
    ident = connector["uuid"]
    for patch in (
        [{"op": "replace", "path": "/uuid", "value": str(uuid.uuid4())}],
        [{"op": "replace", "path": "/type", "value": "nvme"}],
        [{"op": "remove", "path": "/type"}],
        [{"op": "replace", "path": "/node_uuid", "value": "not-a-uuid"}],
        [{"op": "replace", "path": "/node_uuid", "value": missing}],
        [{"op": "remove", "path": "/extra/none"}],
    ):
        response = client.patch(f"/v1/volume/connectors/{ident}", json=patch, headers=LATEST)
        assert response.status_code == 400, (patch, response.text)
    assert client.get("/v1/volume/connectors/not-a-uuid", headers=LATEST).status_code == 400
    assert client.get(f"/v1/volume/connectors/{missing}", headers=LATEST).status_code == 404
    for query in ("sort_key=extra", "fields=nope", "marker=nope", "fields=uuid&detail=true", "x=1"):
        response = client.get(f"/v1/volume/connectors?{query}", headers=LATEST)
        assert response.status_code == 400, (query, response.text)
    assert client.get(f"/v1/volume/connectors?node={missing}", headers=LATEST).status_code == 404
    assert client.get(f"/v1/nodes/{missing}/volume/connectors", headers=LATEST).status_code == 404
    assert client.get("/v1/volume/targets?sort_key=properties", headers=LATEST).status_code == 400


def test_a_connector_moves_to_another_node_of_the_same_owner(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    first = create_node(client, owner="p1")["uuid"]
    second = create_node(client, owner="p1")["uuid"]
    foreign = create_node(client, owner="p2")["uuid"]
    connector = _connector(client, first)
    for node in (first, second, foreign):
        _power(client, node, "power off")
    moved = client.patch(
        f"/v1/volume/connectors/{connector['uuid']}",
        json=[{"op": "replace", "path": "/node_uuid", "value": second}],
        headers=LATEST,
    )
    assert moved.status_code == 200, moved.text
    assert moved.json()["node_uuid"] == second
    refused = client.patch(
        f"/v1/volume/connectors/{connector['uuid']}",
        json=[{"op": "replace", "path": "/node_uuid", "value": foreign}],
        headers=LATEST,
    )
    assert refused.status_code == 400
    assert "Requested value was invalid" in error_text(refused)


def test_power_rules_follow_ironic(sqlite_stack: Stack) -> None:
    """Updates need the node off; deletions need it off or in enroll/manageable/adopt failed."""
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    _power(client, node, "power on")
    # Creating needs neither.
    connector = _connector(client, node)
    target = _target(client, node, 0)
    extra = [{"op": "add", "path": "/extra/k", "value": "v"}]
    for what, record in (("connector", connector), ("target", target)):
        refused = client.patch(f"/v1/volume/{what}s/{record['uuid']}", json=extra, headers=LATEST)
        assert refused.status_code == 400, refused.text
        assert error_text(refused) == (
            f'The requested action "volume {what} update" can not be performed on node '
            f'"{node}" while it is in state "power on".'
        )
    # In enroll a powered-on node's records may be deleted.
    assert client.delete(f"/v1/volume/targets/{target['uuid']}", headers=LATEST).status_code == 204

    assert provision(client, node, "manage").status_code == 202
    wait_for_state(client, node, "manageable")
    assert provision(client, node, "provide").status_code == 202
    wait_for_state(client, node, "available")
    _power(client, node, "power on")
    refused = client.delete(f"/v1/volume/connectors/{connector['uuid']}", headers=LATEST)
    assert refused.status_code == 400, refused.text
    assert 'The requested action "volume connector deletion"' in error_text(refused)
    _power(client, node, "power off")
    assert (
        client.delete(f"/v1/volume/connectors/{connector['uuid']}", headers=LATEST).status_code
        == 204
    )


def test_volume_appears_at_1_32(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    connector = _connector(client, node)
    old = version("1.31")
    for method, path in (
        ("GET", "/v1/volume"),
        ("GET", "/v1/volume/connectors"),
        ("GET", f"/v1/volume/connectors/{connector['uuid']}"),
        ("GET", "/v1/volume/targets"),
        ("GET", f"/v1/nodes/{node}/volume"),
        ("GET", f"/v1/nodes/{node}/volume/connectors"),
        ("POST", "/v1/volume/connectors"),
        ("PATCH", f"/v1/volume/connectors/{connector['uuid']}"),
        ("DELETE", f"/v1/volume/connectors/{connector['uuid']}"),
    ):
        response = client.request(method, path, json=[], headers=old)
        assert response.status_code == 404, (method, path, response.text)
    assert "volume" not in client.get("/v1/", headers=old).json()
    assert "volume" not in client.get(f"/v1/nodes/{node}", headers=old).json()
    new = version("1.32")
    assert client.get("/v1/", headers=new).json()["volume"] == [
        {"href": f"{BASE}/v1/volume/", "rel": "self"},
        {"href": f"{BASE}/volume/", "rel": "bookmark"},
    ]
    assert client.get(f"/v1/nodes/{node}", headers=new).json()["volume"] == [
        {"href": f"{BASE}/v1/nodes/{node}/volume", "rel": "self"},
        {"href": f"{BASE}/nodes/{node}/volume", "rel": "bookmark"},
    ]
    root = client.get("/v1/volume", headers=new).json()
    assert root == {
        "links": [
            {"href": f"{BASE}/v1/volume/", "rel": "self"},
            {"href": f"{BASE}/volume/", "rel": "bookmark"},
        ],
        "connectors": [
            {"href": f"{BASE}/v1/volume/connectors", "rel": "self"},
            {"href": f"{BASE}/volume/connectors", "rel": "bookmark"},
        ],
        "targets": [
            {"href": f"{BASE}/v1/volume/targets", "rel": "self"},
            {"href": f"{BASE}/volume/targets", "rel": "bookmark"},
        ],
    }
    under = client.get(f"/v1/nodes/{node}/volume", headers=new).json()
    assert under["targets"][0]["href"] == f"{BASE}/v1/nodes/{node}/volume/targets"
    missing = client.get(f"/v1/nodes/{uuid.uuid4()}/volume", headers=new)
    assert missing.status_code == 404


def test_pages_follow_the_marker(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    made = [_target(client, node, i)["uuid"] for i in range(3)]
    first = client.get("/v1/volume/targets?limit=2", headers=LATEST).json()
    assert [t["uuid"] for t in first["targets"]] == made[:2]
    assert f"marker={made[1]}" in first["next"]
    rest = client.get(first["next"].removeprefix(BASE), headers=LATEST).json()
    assert [t["uuid"] for t in rest["targets"]] == made[2:]
    assert "next" not in rest
    by_index = client.get("/v1/volume/targets?sort_key=boot_index&sort_dir=desc", headers=LATEST)
    assert [t["uuid"] for t in by_index.json()["targets"]] == made[::-1]
    under = client.get(f"/v1/nodes/{node}/volume/targets?limit=1", headers=LATEST).json()
    assert under["next"].startswith(f"{BASE}/v1/nodes/{node}/volume/targets?")


def test_storage_interfaces_noop_and_external_on_every_hardware_type(sqlite_stack: Stack) -> None:
    for hardware in HARDWARE_TYPES.values():
        assert hardware.names("storage") == ["noop", "external"], hardware.name
    client = sqlite_stack.client
    node = create_node(client, storage_interface="external")
    assert node["storage_interface"] == "external"
    patched = client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[{"op": "replace", "path": "/storage_interface", "value": "noop"}],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["storage_interface"] == "noop"
    refused = client.post(
        "/v1/nodes",
        json={"driver": "fake-hardware", "storage_interface": "cinder"},
        headers=LATEST,
    )
    assert refused.status_code == 400, refused.text
    # A target needs nothing of the node's storage interface.
    _target(client, node["uuid"], 0)


def test_a_nodes_volume_records_go_with_it(stack: Stack) -> None:
    client = stack.client
    node = create_node(client)["uuid"]
    kept = create_node(client)["uuid"]
    connector = _connector(client, node)
    target = _target(client, node, 0)
    _connector(client, kept)
    assert client.delete(f"/v1/nodes/{node}", headers=LATEST).status_code == 204
    assert (
        client.get(f"/v1/volume/connectors/{connector['uuid']}", headers=LATEST).status_code == 404
    )
    assert client.get(f"/v1/volume/targets/{target['uuid']}", headers=LATEST).status_code == 404
    with stack.db.read() as session:
        assert session.scalar(select(func.count()).select_from(VolumeConnector)) == 1
        assert session.scalar(select(func.count()).select_from(VolumeTarget)) == 0


def test_a_write_right_after_a_power_request_waits_for_it(sqlite_stack: Stack) -> None:
    """As Ironic, whose conductor holds the node's lock from the power request on."""
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    _power(client, node, "power on")
    connector = _connector(client, node)
    response = client.put(
        f"/v1/nodes/{node}/states/power", json={"target": "power off"}, headers=LATEST
    )
    assert response.status_code == 202, response.text
    patched = client.patch(
        f"/v1/volume/connectors/{connector['uuid']}",
        json=[{"op": "add", "path": "/extra/k", "value": "v"}],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text


def test_projects_see_and_change_the_records_of_their_nodes(
    sqlite_url: str, tmp_path: Path
) -> None:
    stack = start_stack(basic_auth_settings(sqlite_url, tmp_path))
    try:
        client = stack.client
        client.headers.update(ADMIN.headers)
        owned = create_node(client, owner="p-owner", lessee="p-lessee")["uuid"]
        other = create_node(client, owner="p-other")["uuid"]
        mine = _target(client, owned, 0, properties={"target_lun": 1})
        theirs = _target(client, other, 0)

        listed = client.get("/v1/volume/targets", headers=LESSEE_MEMBER.headers)
        assert [t["uuid"] for t in listed.json()["targets"]] == [mine["uuid"]]
        hidden = client.get(f"/v1/volume/targets/{theirs['uuid']}", headers=OWNER_MEMBER.headers)
        assert hidden.status_code == 404
        assert f"Volume target {theirs['uuid']} could not be found." in error_text(hidden)
        elsewhere = client.get(f"/v1/nodes/{other}/volume/targets", headers=OWNER_MEMBER.headers)
        assert elsewhere.status_code == 404
        marker = client.get(
            f"/v1/volume/targets?marker={theirs['uuid']}", headers=OWNER_MEMBER.headers
        )
        assert marker.status_code == 400

        # A member sees the record but not the properties (an admin's, or a system reader's).
        shown = client.get(f"/v1/volume/targets/{mine['uuid']}", headers=OWNER_MEMBER.headers)
        assert shown.json()["properties"] == REDACTED
        admin_view = client.get(f"/v1/volume/targets/{mine['uuid']}", headers=OWNER_ADMIN.headers)
        assert admin_view.json()["properties"] == {"target_lun": 1}

        # Creating takes an admin of the owner or the lessee (or a system member).
        body = {"node_uuid": owned, "type": "iqn", "connector_id": "iqn.p"}
        refused = client.post("/v1/volume/connectors", json=body, headers=OWNER_MEMBER.headers)
        assert refused.status_code == 403
        made = client.post("/v1/volume/connectors", json=body, headers=LESSEE_ADMIN.headers)
        assert made.status_code == 201, made.text
        unseen = {"node_uuid": other, "type": "iqn", "connector_id": "iqn.q"}
        assert (
            client.post("/v1/volume/connectors", json=unseen, headers=OWNER_ADMIN.headers)
        ).status_code == 403
        assert client.get("/v1/volume", headers=OWNER_ADMIN.headers).status_code == 403
    finally:
        stack.stop()
