"""Node rules Ironic enforces on update: protection, retirement, interfaces reset on removal,
and the agent's heartbeat naming its node in the body."""

from __future__ import annotations

import uuid

from sqlalchemy import update

from metalforge.db.models import Node
from tests.support.api import LATEST, error_text, make_available, provision, version, wait_for_state
from tests.support.stack import Stack, start_stack, test_settings


def _patch(stack: Stack, node: str, *ops: dict[str, object]) -> object:
    return stack.client.patch(f"/v1/nodes/{node}", json=list(ops), headers=LATEST)


def test_protection_and_retirement_follow_ironics_rules(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = make_available(client)["uuid"]
    protect = {"op": "replace", "path": "/protected", "value": True}
    refused = client.patch(f"/v1/nodes/{node}", json=[protect], headers=LATEST)
    assert refused.status_code == 409, refused.text
    assert "can only be made protected" in error_text(refused)
    retire = {"op": "replace", "path": "/retired", "value": True}
    assert client.patch(f"/v1/nodes/{node}", json=[retire], headers=LATEST).status_code == 409
    reason = {"op": "add", "path": "/protected_reason", "value": "why"}
    lone = client.patch(f"/v1/nodes/{node}", json=[reason], headers=LATEST)
    assert lone.status_code == 400, lone.text

    assert provision(client, node, "active").status_code == 202
    wait_for_state(client, node, "active")
    done = client.patch(f"/v1/nodes/{node}", json=[protect, reason], headers=LATEST)
    assert done.status_code == 200, done.text
    assert (done.json()["protected"], done.json()["protected_reason"]) == (True, "why")
    unprotect = {"op": "replace", "path": "/protected", "value": False}
    cleared = client.patch(f"/v1/nodes/{node}", json=[unprotect], headers=LATEST).json()
    assert (cleared["protected"], cleared["protected_reason"]) == (False, None)


def test_removing_an_interface_resets_it_to_the_driver_default(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = client.post(
        "/v1/nodes",
        json={"driver": "fake-hardware", "storage_interface": "external"},
        headers=LATEST,
    ).json()
    for family, default in (("storage", "noop"), ("boot", "fake"), ("network", "noop")):
        response = client.patch(
            f"/v1/nodes/{node['uuid']}",
            json=[{"op": "remove", "path": f"/{family}_interface"}],
            headers=LATEST,
        )
        assert response.status_code == 200, response.text
        assert response.json()[f"{family}_interface"] == default


def test_a_heartbeat_may_name_its_node_in_the_body(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST).json()
    body = {
        "node_ident": node["uuid"],
        "callback_url": "http://192.0.2.9:9999",
        "agent_token": "not-the-token",
    }
    old = client.post("/v1/heartbeat", json=body, headers=version("1.21"))
    assert old.status_code == 404, old.text
    # The node exists but issued no token: refused as a heartbeat to its path would be.
    named = client.post("/v1/heartbeat", json=body, headers=version("1.22"))
    by_path = client.post(
        f"/v1/heartbeat/{node['uuid']}",
        json={k: v for k, v in body.items() if k != "node_ident"},
        headers=version("1.22"),
    )
    assert (named.status_code, error_text(named)) == (by_path.status_code, error_text(by_path))
    assert named.status_code != 404
    missing = client.post(
        "/v1/heartbeat", json={**body, "node_ident": str(uuid.uuid4())}, headers=version("1.22")
    )
    assert missing.status_code == 404, missing.text


def test_children_lists_the_nodes_naming_their_parent(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    parent = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST).json()
    child = client.post(
        "/v1/nodes",
        json={"driver": "fake-hardware", "parent_node": parent["uuid"]},
        headers=LATEST,
    ).json()
    shown = client.get(f"/v1/nodes/{parent['uuid']}/children", headers=LATEST)
    assert shown.json() == {"children": [child["uuid"]]}
    assert client.get(f"/v1/nodes/{child['uuid']}/children", headers=LATEST).json() == {
        "children": []
    }
    old = client.get(f"/v1/nodes/{parent['uuid']}/children", headers=version("1.82"))
    assert old.status_code == 404, old.text
    # Children are hidden from a plain node list unless asked for.
    listed = client.get("/v1/nodes", headers=LATEST).json()["nodes"]
    assert [n["uuid"] for n in listed] == [parent["uuid"]]


def test_a_nodes_ports_are_listed_under_it_at_every_version(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST).json()
    port = client.post(
        "/v1/ports",
        json={"node_uuid": node["uuid"], "address": "52:54:00:cc:00:01"},
        headers=LATEST,
    ).json()
    for headers in ({}, version("1.1"), LATEST):
        listed = client.get(f"/v1/nodes/{node['uuid']}/ports", headers=headers)
        assert listed.status_code == 200, listed.text
        assert [p["uuid"] for p in listed.json()["ports"]] == [port["uuid"]]
    detail = client.get(f"/v1/nodes/{node['uuid']}/ports/detail", headers=version("1.1"))
    assert detail.json()["ports"][0]["address"] == "52:54:00:cc:00:01"


def test_an_absurd_bmc_setting_is_a_validation_failure_not_a_500(sqlite_url: str) -> None:
    running = start_stack(
        test_settings(sqlite_url, enabled_hardware_types=["fake-hardware", "ipmi"])
    )
    try:
        _absurd_setting_is_reported(running)
    finally:
        running.stop()


def _absurd_setting_is_reported(stack: Stack) -> None:
    """Enroll refuses such settings (400); a row that holds them anyway (written by an
    older release) fails validation naming the key, never a 500."""
    client = stack.client
    absurd = {"ipmi_address": "192.0.2.1", "ipmi_port": "nan", "ipmi_retries": 10**8}
    refused = client.post(
        "/v1/nodes", json={"driver": "ipmi", "driver_info": absurd}, headers=LATEST
    )
    assert refused.status_code == 400, refused.text
    node = client.post(
        "/v1/nodes",
        json={"driver": "ipmi", "driver_info": {"ipmi_address": "192.0.2.1"}},
        headers=LATEST,
    ).json()
    with stack.db.write() as session:
        session.execute(update(Node).where(Node.uuid == node["uuid"]).values(driver_info=absurd))
    shown = client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST)
    assert shown.status_code == 200, shown.text
    power = shown.json()["power"]
    assert power["result"] is False
    assert "ipmi_port must be a number from 1 to 65535" in power["reason"]
