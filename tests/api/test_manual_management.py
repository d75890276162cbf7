"""``manual-management``: an operator powers the machine and its boot order is fixed.

As Ironic's hardware type: ``fake`` power records what a flow asked for,
``noop`` management accepts a boot device and changes nothing, and the
agent's interfaces do the rest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from metalforge.states import MANAGEABLE
from tests.support.api import LATEST, create_node, error_text, provision, wait_for_state
from tests.support.stack import Stack, start_stack, test_settings


@pytest.fixture
def manual_stack(sqlite_url: str) -> Iterator[Stack]:
    running = start_stack(test_settings(sqlite_url, enabled_hardware_types=["manual-management"]))
    try:
        yield running
    finally:
        running.stop()


def test_a_manual_node_takes_ironics_defaults_and_its_boot_order_is_the_operators(
    manual_stack: Stack,
) -> None:
    client = manual_stack.client
    node = create_node(client, driver="manual-management", name="by-hand")
    assert (node["power_interface"], node["management_interface"]) == ("fake", "noop")
    assert node["deploy_interface"] == "direct"
    assert node["boot_interface"] == "pxe"
    driver = client.get("/v1/drivers/manual-management", headers=LATEST).json()
    assert driver["enabled_management_interfaces"] == ["noop", "fake"]

    url = "/v1/nodes/by-hand/management/boot_device"
    supported = client.get(f"{url}/supported", headers=LATEST)
    assert supported.json() == {"supported_boot_devices": ["pxe", "disk"]}
    assert client.put(url, json={"boot_device": "disk"}, headers=LATEST).status_code == 204
    assert client.get(url, headers=LATEST).json() == {"boot_device": "pxe", "persistent": True}
    refused = client.put(url, json={"boot_device": "cdrom"}, headers=LATEST)
    assert refused.status_code == 400
    assert "supported: pxe, disk" in error_text(refused)

    assert provision(client, "by-hand", "manage").status_code == 202
    managed = wait_for_state(client, "by-hand", MANAGEABLE)
    assert managed["last_error"] is None
    power = client.put(
        "/v1/nodes/by-hand/states/power", json={"target": "power on"}, headers=LATEST
    )
    assert power.status_code == 202
