"""Rescue and unrescue do what they say, or are refused; never a silent success."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.support.api import (
    LATEST,
    error_text,
    get_node,
    make_available,
    provision,
    wait_for_state,
)
from tests.support.stack import Stack


def _active(client: TestClient, **fields: object) -> dict[str, object]:
    node = make_available(client, **fields)
    assert provision(client, str(node["uuid"]), "active").status_code == 202
    return wait_for_state(client, str(node["uuid"]), "active")


def test_rescue_and_unrescue_on_fake_hardware_have_visible_effects(stack: Stack) -> None:
    client = stack.client
    node = _active(client, name="rescued")
    assert provision(client, "rescued", "rescue", rescue_password="tr0ub4dor").status_code == 202
    rescued = wait_for_state(client, "rescued", "rescue")
    assert rescued["power_state"] == "power on"
    assert "fake_rescued_at" in rescued["driver_internal_info"]
    assert "rescue_password" not in rescued["instance_info"], "consumed by the rescue system"
    assert rescued["last_error"] is None
    assert provision(client, "rescued", "unrescue").status_code == 202
    back = wait_for_state(client, "rescued", "active")
    assert "fake_rescued_at" not in back["driver_internal_info"]
    assert "fake_unrescued_at" in back["driver_internal_info"]
    assert back["uuid"] == node["uuid"]


def test_a_failing_rescue_ends_in_rescue_failed_with_the_reason(stack: Stack) -> None:
    client = stack.client
    _active(client, name="unlucky", driver_info={"fake_fail_steps": "rescue.rescue"})
    assert provision(client, "unlucky", "rescue", rescue_password="pw").status_code == 202
    failed = wait_for_state(client, "unlucky", "rescue failed")
    assert "Failed to rescue the node" in failed["last_error"]
    assert "rescue.rescue" in failed["last_error"]


def test_rescue_is_refused_for_a_node_without_a_rescue_interface(stack: Stack) -> None:
    """redfish and ipmi nodes have only ``no-rescue`` today: a clear 400, nothing moves."""
    client = stack.client
    _active(client, name="norescue", rescue_interface="no-rescue")
    before = get_node(client, "norescue")
    response = provision(client, "norescue", "rescue", rescue_password="pw")
    assert response.status_code == 400
    assert "cannot be rescued: its rescue interface is 'no-rescue'" in error_text(response)
    after = get_node(client, "norescue")
    assert after["provision_state"] == "active"
    assert after["instance_info"] == before["instance_info"]
    refused = client.put(
        "/v1/nodes/norescue/states/provision", json={"target": "unrescue"}, headers=LATEST
    )
    assert refused.status_code == 400
