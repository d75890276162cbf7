"""A node's whole life through the API, on SQLite and PostgreSQL."""

from __future__ import annotations

from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    get_node,
    make_available,
    provision,
    wait_for_state,
)
from tests.support.stack import Stack


def test_enroll_to_active_and_back(stack: Stack) -> None:
    client = stack.client
    node = make_available(client, name="life-1")
    assert node["power_state"] == "power off"
    named = client.patch(
        "/v1/nodes/life-1",
        json=[{"op": "add", "path": "/instance_info/display_name", "value": "web-1"}],
        headers=LATEST,
    )
    assert named.status_code == 200, named.text
    assert named.json()["instance_name"] == "web-1"
    response = provision(client, "life-1", "active", configdrive={"meta_data": {"hostname": "h"}})
    assert response.status_code == 202
    assert response.headers["Location"].endswith(f"/v1/nodes/{node['uuid']}/states")
    after = get_node(client, "life-1")
    assert after["provision_state"] in ("deploying", "wait call-back", "active")
    node = wait_for_state(client, "life-1", "active")
    assert node["power_state"] == "power on"
    assert node["instance_info"]["configdrive"] == "******"
    assert provision(client, "life-1", "deleted").status_code == 202
    node = wait_for_state(client, "life-1", "available")
    assert node["instance_info"] == {}
    assert node["instance_name"] is None
    events = client.get(f"/v1/nodes/{node['uuid']}/history", headers=LATEST).json()["history"]
    texts = [e["event"] for e in events]
    assert "available -> deploying (active)" in texts
    assert "deleting -> cleaning (done)" in texts
    assert texts[-1] == "cleaning -> available (done)"


def test_transition_is_visible_before_202_returns(stack: Stack) -> None:
    client = stack.client
    node = create_node(client)
    assert provision(client, node["uuid"], "manage").status_code == 202
    seen = get_node(client, node["uuid"])
    assert (seen["provision_state"], seen["target_provision_state"]) in (
        ("verifying", "manageable"),
        ("manageable", None),
    )


def test_invalid_verb_for_state_is_400_and_changes_nothing(stack: Stack) -> None:
    client = stack.client
    node = create_node(client)
    response = provision(client, node["uuid"], "provide")
    assert response.status_code == 400
    assert "can not be performed on node" in error_text(response)
    assert 'while it is in state "enroll"' in error_text(response)
    assert get_node(client, node["uuid"])["provision_state"] == "enroll"


def test_failing_deploy_step_ends_in_deploy_failed(stack: Stack) -> None:
    client = stack.client
    node = make_available(client, driver_info={"fake_fail_steps": "deploy.write_image"})
    assert provision(client, node["uuid"], "active").status_code == 202
    node = wait_for_state(client, node["uuid"], "deploy failed")
    assert "deploy.write_image" in node["last_error"]
    assert node["deploy_step"] == {}


def test_asynchronous_step_waits_in_wait_state(stack: Stack) -> None:
    client = stack.client
    node = make_available(client, driver_info={"fake_step_delay": 0.5})
    assert provision(client, node["uuid"], "active").status_code == 202
    node = wait_for_state(client, node["uuid"], "wait call-back", field="provision_state")
    assert node["deploy_step"]["step"] == "write_image"
    wait_for_state(client, node["uuid"], "active")


def test_power_on_off(stack: Stack) -> None:
    client = stack.client
    node = create_node(client)
    response = client.put(
        f"/v1/nodes/{node['uuid']}/states/power", json={"target": "power on"}, headers=LATEST
    )
    assert response.status_code == 202
    wait_for_state(client, node["uuid"], "power on", field="power_state")
    client.put(
        f"/v1/nodes/{node['uuid']}/states/power", json={"target": "power off"}, headers=LATEST
    )
    node = wait_for_state(client, node["uuid"], "power off", field="power_state")
    assert node["target_power_state"] is None
