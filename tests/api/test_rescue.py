"""Rescue and unrescue do what they say, or are refused; never a silent success."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.support.api import (
    LATEST,
    error_text,
    get_node,
    make_available,
    provision,
    wait_for_state,
)
from tests.support.stack import Stack, start_stack
from tests.support.stack import test_settings as stack_settings


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
    """``no-rescue`` (the default of redfish and ipmi nodes): a clear 400, nothing moves."""
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


# -- the agent rescue interface, without an agent ------------------------------------------
# (With the real agent, booted by a QEMU machine, rescue is proven in
# tests/netboot/test_vm_lifecycle_network.py.)


@pytest.fixture
def impatient(sqlite_url: str) -> Iterator[Stack]:
    """A stack whose rescues wait 1 s for the rescue system."""
    running = start_stack(stack_settings(sqlite_url, rescue_callback_timeout=1))
    try:
        yield running
    finally:
        running.stop()


def test_agent_rescue_that_no_agent_answers_fails_after_its_timeout_and_cleans_up(
    impatient: Stack,
) -> None:
    client = impatient.client
    _active(client, name="lonely", rescue_interface="agent")
    assert provision(client, "lonely", "rescue", rescue_password="pw").status_code == 202
    waiting = wait_for_state(client, "lonely", "rescue wait")
    assert waiting["instance_info"]["hashed_rescue_password"] == "******"
    assert "rescue_password" not in waiting["instance_info"], "hashed at once"
    failed = wait_for_state(client, "lonely", "rescue failed")
    assert "Timed out after 1s waiting for the rescue system to come up" in failed["last_error"]
    history = client.get("/v1/nodes/lonely/history?detail=True", headers=LATEST)
    assert not [e for e in history.json()["history"] if e["event_type"] == "takeover"]
    assert failed["power_state"] == "power off", "the ramdisk is stopped"
    assert "hashed_rescue_password" not in failed["instance_info"]
    assert provision(client, "lonely", "unrescue").status_code == 202
    back = wait_for_state(client, "lonely", "active")
    assert back["power_state"] == "power on"


def test_an_aborted_agent_rescue_stops_the_ramdisk(stack: Stack) -> None:
    client = stack.client
    _active(client, name="aborted", rescue_interface="agent")
    assert provision(client, "aborted", "rescue", rescue_password="pw").status_code == 202
    wait_for_state(client, "aborted", "rescue wait")
    assert provision(client, "aborted", "abort").status_code == 202
    failed = wait_for_state(client, "aborted", "rescue failed")
    assert failed["power_state"] == "power off"
    assert "hashed_rescue_password" not in failed["instance_info"]


def test_a_password_the_agent_rescue_cannot_take_is_refused_up_front(stack: Stack) -> None:
    client = stack.client
    _active(client, name="longpw", rescue_interface="agent")
    response = provision(client, "longpw", "rescue", rescue_password="x" * 73)
    assert response.status_code == 400
    assert "rescue_password must be at most 72 bytes" in error_text(response)
    after = get_node(client, "longpw")
    assert after["provision_state"] == "active"
    assert "rescue_password" not in after["instance_info"]


def test_an_agent_rescue_whose_ramdisk_cannot_boot_fails_and_forgets_the_password(
    stack: Stack,
) -> None:
    """The ``ipxe`` boot without deploy images: the boot fails at once, with the reason."""
    client = stack.client
    _active(client, name="noimages", rescue_interface="agent", boot_interface="ipxe")
    assert provision(client, "noimages", "rescue", rescue_password="pw").status_code == 202
    failed = wait_for_state(client, "noimages", "rescue failed")
    assert "Failed to rescue the node" in failed["last_error"]
    assert "deploy_kernel" in failed["last_error"]
    assert "hashed_rescue_password" not in failed["instance_info"]
    assert "rescue_password" not in failed["instance_info"]
    assert failed["power_state"] == "power off"
    history = client.get("/v1/nodes/noimages/history?detail=True", headers=LATEST)
    assert not [e for e in history.json()["history"] if e["event_type"] == "takeover"]
