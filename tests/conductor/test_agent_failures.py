"""What happens to a ``redfish`` + ``direct`` node when the ramdisk or the BMC lets it down.

A real Redfish emulator powers the node, but no agent ever boots (the virtual
lab is not attached), which is what a broken ramdisk image or provisioning
network looks like from metalforge. Every case must end in a failure state
with a reason, never in a node that waits forever.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.states import CLEAN_FAILED, CLEAN_WAIT, DEPLOY_WAIT, MANAGEABLE
from tests.support.api import LATEST, create_node, get_node, provision, wait_for_state
from tests.support.redfish import Bmc, start_bmc
from tests.support.stack import Stack, start_stack
from tests.support.stack import test_settings as stack_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    yield from start_bmc(tmp_path_factory.mktemp("bmc"), count=6)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    settings = stack_settings(
        f"sqlite:///{tmp_path}/metalforge.sqlite",
        enabled_hardware_types=["redfish"],
        clean_callback_timeout=2.0,
        deploy_callback_timeout=2.0,
    )
    running = start_stack(settings)
    try:
        yield running
    finally:
        running.stop()


def _manageable_node(stack: Stack, bmc: Bmc) -> tuple[dict[str, Any], Any]:
    system = bmc.take()
    node = create_node(
        stack.client,
        driver="redfish",
        driver_info=bmc.driver_info(system),
        boot_interface="pxe",
        deploy_interface="direct",
    )
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], MANAGEABLE)
    return node, system


def test_a_ramdisk_that_never_reports_fails_cleaning_after_the_timeout(
    stack: Stack, bmc: Bmc
) -> None:
    node, system = _manageable_node(stack, bmc)
    assert provision(stack.client, node["uuid"], "provide").status_code == 202
    failed = wait_for_state(stack.client, node["uuid"], CLEAN_FAILED, timeout=30)
    assert "the ramdisk agent did not come up within 2s" in failed["last_error"]
    assert failed["maintenance"] is True
    shown = bmc.system(system)
    assert shown["PowerState"] == "On", "the node was powered on into its ramdisk"
    assert shown["Boot"]["BootSourceOverrideTarget"] == "Pxe"


def test_an_unreachable_bmc_fails_cleaning_with_the_reason(stack: Stack, bmc: Bmc) -> None:
    node, _system = _manageable_node(stack, bmc)
    patch = [
        {"op": "replace", "path": "/driver_info/redfish_address", "value": "http://127.0.0.1:9"}
    ]
    response = stack.client.patch(f"/v1/nodes/{node['uuid']}", json=patch, headers=LATEST)
    assert response.status_code == 200, response.text
    assert provision(stack.client, node["uuid"], "provide").status_code == 202
    failed = wait_for_state(stack.client, node["uuid"], CLEAN_FAILED, timeout=60)
    assert "Failed to prepare the node for cleaning" in failed["last_error"]
    assert "127.0.0.1:9" in failed["last_error"]
    assert failed["reservation"] is None


def test_abort_while_the_ramdisk_boots_powers_the_node_off(stack: Stack, bmc: Bmc) -> None:
    settings = stack.settings.conductor
    settings.clean_callback_timeout = 600.0
    node, system = _manageable_node(stack, bmc)
    steps = [{"interface": "deploy", "step": "erase_devices_metadata"}]
    assert provision(stack.client, node["uuid"], "clean", clean_steps=steps).status_code == 202
    wait_for_state(stack.client, node["uuid"], CLEAN_WAIT, timeout=30)
    catalogue = stack.client.get(f"/v1/nodes/{node['uuid']}/cleaning/steps", headers=LATEST)
    assert catalogue.status_code == 202, "no agent has reported its steps"
    assert provision(stack.client, node["uuid"], "abort").status_code == 202
    failed = wait_for_state(stack.client, node["uuid"], CLEAN_FAILED, timeout=30)
    assert "aborted" in failed["last_error"].lower()
    assert bmc.system(system)["PowerState"] == "Off"


def test_a_deploy_whose_ramdisk_never_reports_fails_after_the_timeout(
    stack: Stack, bmc: Bmc
) -> None:
    node, _system = _manageable_node(stack, bmc)
    stack.client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[{"op": "add", "path": "/automated_clean", "value": False}],
        headers=LATEST,
    )
    assert provision(stack.client, node["uuid"], "provide").status_code == 202
    wait_for_state(stack.client, node["uuid"], "available", timeout=30)
    stack.client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[
            {"op": "add", "path": "/instance_info/image_source", "value": "http://x/i.raw"},
            {"op": "add", "path": "/instance_info/image_checksum", "value": "a" * 64},
        ],
        headers=LATEST,
    )
    assert provision(stack.client, node["uuid"], "active").status_code == 202
    wait_for_state(stack.client, node["uuid"], DEPLOY_WAIT, timeout=30)
    failed = wait_for_state(stack.client, node["uuid"], "deploy failed", timeout=30)
    assert "deploy.deploy" in failed["last_error"]
    assert "timed out after 2s" in failed["last_error"]
    assert get_node(stack.client, node["uuid"])["reservation"] is None
