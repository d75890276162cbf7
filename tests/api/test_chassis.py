"""Chassis: the ``/v1/chassis`` resource and nodes' references to it.

Shape and rules on SQLite; the reference rule (a chassis with nodes is not
deleted, a node names only an existing chassis) on both engines, since it
rests on row locks rather than a foreign key.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from typing import Any

from fastapi.testclient import TestClient

from metalforge.db.engine import Database
from tests.support.api import LATEST, error_text, version
from tests.support.stack import Stack


def _create(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/chassis", json=body, headers=LATEST)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def test_create_show_list_patch_delete(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    chosen = str(uuid.uuid4())
    text = "Стійка ♡ 7"  # not ASCII, as operators name racks
    created = _create(client, uuid=chosen, description=text, extra={"r": 1})
    assert created["uuid"] == chosen
    assert created["description"] == text
    assert created["extra"] == {"r": 1}
    base = "http://testserver"
    assert created["links"] == [
        {"href": f"{base}/v1/chassis/{chosen}", "rel": "self"},
        {"href": f"{base}/chassis/{chosen}", "rel": "bookmark"},
    ]
    # Ironic renders `nodes` as a list holding the links list.
    assert created["nodes"] == [
        [
            {"href": f"{base}/v1/chassis/{chosen}/nodes", "rel": "self"},
            {"href": f"{base}/chassis/{chosen}/nodes", "rel": "bookmark"},
        ]
    ]
    assert set(created) == {
        "uuid",
        "description",
        "extra",
        "created_at",
        "updated_at",
        "links",
        "nodes",
    }

    listed = client.get("/v1/chassis", headers=LATEST).json()["chassis"]
    assert listed == [
        {"uuid": chosen, "description": created["description"], "links": created["links"]}
    ]
    detail = client.get("/v1/chassis/detail", headers=LATEST).json()["chassis"]
    assert detail[0]["extra"] == {"r": 1}
    assert client.get("/v1/chassis?detail=true", headers=LATEST).json()["chassis"] == detail
    only = client.get(f"/v1/chassis/{chosen}?fields=extra", headers=LATEST).json()
    assert only == {"extra": {"r": 1}, "links": created["links"]}

    patched = client.patch(
        f"/v1/chassis/{chosen}",
        json=[
            {"op": "replace", "path": "/description", "value": "rack 7"},
            {"op": "add", "path": "/extra/row", "value": "B"},
        ],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["description"] == "rack 7"
    assert patched.json()["extra"] == {"r": 1, "row": "B"}
    assert patched.json()["updated_at"] is not None

    assert client.delete(f"/v1/chassis/{chosen}", headers=LATEST).status_code == 204
    gone = client.get(f"/v1/chassis/{chosen}", headers=LATEST)
    assert gone.status_code == 404
    assert f"Chassis {chosen} could not be found." in error_text(gone)


def test_bad_chassis_input_is_refused_and_changes_nothing(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    chassis = _create(client, description="d")
    for body in (
        {"description": "x" * 256},
        {"uuid": "not-a-uuid"},
        {"extra": "text"},
        {"name": "chassis have no name"},
    ):
        response = client.post("/v1/chassis", json=body, headers=LATEST)
        assert response.status_code == 400, (body, response.text)
    duplicate = client.post("/v1/chassis", json={"uuid": chassis["uuid"]}, headers=LATEST)
    assert duplicate.status_code == 409, duplicate.text
    for patch in (
        [{"op": "replace", "path": "/uuid", "value": str(uuid.uuid4())}],
        [{"op": "replace", "path": "/description", "value": "x" * 256}],
        [{"op": "replace", "path": "/extra", "value": [1]}],
        [{"op": "remove", "path": "/extra/none"}],
    ):
        response = client.patch(f"/v1/chassis/{chassis['uuid']}", json=patch, headers=LATEST)
        assert response.status_code == 400, (patch, response.text)
    shown = client.get(f"/v1/chassis/{chassis['uuid']}", headers=LATEST).json()
    assert (shown["description"], shown["extra"], shown["updated_at"]) == ("d", {}, None)
    assert client.get("/v1/chassis/not-a-uuid", headers=LATEST).status_code == 400
    assert client.get(f"/v1/chassis/{uuid.uuid4()}", headers=LATEST).status_code == 404
    assert client.get("/v1/chassis?sort_key=extra", headers=LATEST).status_code == 400
    assert client.get("/v1/chassis?fields=nope", headers=LATEST).status_code == 400


def test_chassis_pages_follow_the_marker(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    made = [_create(client, description=f"c{i}")["uuid"] for i in range(3)]
    first = client.get("/v1/chassis?limit=2", headers=LATEST).json()
    assert [c["uuid"] for c in first["chassis"]] == made[:2]
    rest = client.get(first["next"].removeprefix("http://testserver"), headers=LATEST).json()
    assert [c["uuid"] for c in rest["chassis"]] == made[2:]
    assert "next" not in rest


def test_a_node_names_only_an_existing_chassis_and_keeps_it(stack: Stack) -> None:
    client = stack.client
    chassis = _create(client)["uuid"]
    missing = str(uuid.uuid4())
    refused = client.post(
        "/v1/nodes", json={"driver": "fake-hardware", "chassis_uuid": missing}, headers=LATEST
    )
    assert refused.status_code == 400, refused.text
    assert f"Chassis {missing} could not be found." in error_text(refused)

    node = client.post(
        "/v1/nodes", json={"driver": "fake-hardware", "chassis_uuid": chassis}, headers=LATEST
    ).json()
    assert node["chassis_uuid"] == chassis
    other = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST).json()

    in_chassis = client.get(f"/v1/chassis/{chassis}/nodes", headers=LATEST).json()["nodes"]
    assert [n["uuid"] for n in in_chassis] == [node["uuid"]]
    detail = client.get(f"/v1/chassis/{chassis}/nodes/detail", headers=LATEST).json()["nodes"]
    assert detail[0]["chassis_uuid"] == chassis
    filtered = client.get(f"/v1/nodes?chassis_uuid={chassis}", headers=LATEST).json()["nodes"]
    assert [n["uuid"] for n in filtered] == [node["uuid"]]

    full = client.delete(f"/v1/chassis/{chassis}", headers=LATEST)
    assert full.status_code == 400, full.text
    assert "contains nodes" in error_text(full)

    moved = client.patch(
        f"/v1/nodes/{other['uuid']}",
        json=[{"op": "add", "path": "/chassis_uuid", "value": missing}],
        headers=LATEST,
    )
    assert moved.status_code == 400, moved.text
    # Removing a node's chassis takes 1.25, as in Ironic.
    remove = [{"op": "remove", "path": "/chassis_uuid"}]
    old = client.patch(f"/v1/nodes/{node['uuid']}", json=remove, headers=version("1.24"))
    assert old.status_code == 406, old.text
    done = client.patch(f"/v1/nodes/{node['uuid']}", json=remove, headers=version("1.25"))
    assert done.status_code == 200, done.text
    assert done.json()["chassis_uuid"] is None
    assert client.delete(f"/v1/chassis/{chassis}", headers=LATEST).status_code == 204


def test_migration_makes_a_chassis_of_every_uuid_nodes_already_name(sqlite_url: str) -> None:
    """Before 0013 a node's chassis_uuid was any UUID; the upgrade makes each one a chassis."""
    database = Database(sqlite_url)
    try:
        database.upgrade("0012")
        named = str(uuid.uuid4())
        path = sqlite_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as connection, connection:
            connection.execute(
                "INSERT INTO nodes (uuid, driver, driver_info, driver_internal_info, "
                "instance_info, properties, extra, console_enabled, maintenance, "
                "provision_state, epoch, clean_step, deploy_step, service_step, raid_config, "
                "target_raid_config, conductor_group, protected, retired, network_data, "
                "disable_power_off, created_at, chassis_uuid) VALUES (?, 'fake-hardware', "
                "'{}', '{}', '{}', '{}', '{}', 0, 0, 'enroll', 0, '{}', '{}', '{}', '{}', '{}', "
                "'', 0, 0, '{}', 0, '2026-01-01 00:00:00', ?)",
                (str(uuid.uuid4()), named),
            )
        database.upgrade()
        with contextlib.closing(sqlite3.connect(path)) as connection:
            rows = connection.execute("SELECT uuid, extra FROM chassis").fetchall()
        assert rows == [(named, "{}")]
    finally:
        database.dispose()
