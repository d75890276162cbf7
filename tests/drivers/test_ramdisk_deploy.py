"""The ``ramdisk`` deploy (Metal3's live ISO) on a Redfish BMC's virtual media, through the API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    get_node,
    provision,
    wait_for_state,
)
from tests.support.redfish import (
    Bmc,
    running_stack,
    serve_directory,
    start_bmc,
)
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    yield from start_bmc(tmp_path_factory.mktemp("bmc"), count=4)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An HTTP server with a small ISO (the emulator downloads what it inserts)."""
    www: Path = tmp_path_factory.mktemp("www")
    (www / "live.iso").write_bytes(b"\0" * 4096)
    yield from serve_directory(www)


@pytest.fixture
def stack(sqlite_url: str) -> Iterator[Stack]:
    yield from running_stack(sqlite_url)


def _patch(stack: Stack, uuid: str, ops: list[dict[str, object]]) -> dict[str, object]:
    answer = stack.client.patch(f"/v1/nodes/{uuid}", json=ops, headers=LATEST)
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


def test_a_live_iso_is_booted_as_the_instance_and_ejected_at_undeploy(
    stack: Stack, bmc: Bmc, images: str
) -> None:
    """Metal3's live ISO: ``deploy_interface: ramdisk``, ``instance_info.boot_iso``, a
    provision with an empty config drive; the node runs the ISO, nothing written."""
    system = bmc.take()
    client = stack.client
    node = create_node(
        client,
        driver="redfish",
        driver_info=bmc.driver_info(system, deploy_iso=f"{images}/live.iso"),
        boot_interface="redfish-virtual-media",
        deploy_interface="ramdisk",
        automated_clean=False,
    )
    uuid = node["uuid"]
    assert provision(client, uuid, "manage").status_code == 202
    wait_for_state(client, uuid, "manageable")
    assert provision(client, uuid, "provide").status_code == 202
    wait_for_state(client, uuid, "available")
    iso = f"{images}/live.iso"
    _patch(stack, uuid, [{"op": "add", "path": "/instance_info/boot_iso", "value": iso}])
    checked = client.get(f"/v1/nodes/{uuid}/validate", headers=LATEST).json()
    assert checked["deploy"]["result"] is True, checked["deploy"]
    assert checked["boot"]["result"] is True, checked["boot"]

    assert provision(client, uuid, "active", configdrive={}).status_code == 202
    active = wait_for_state(client, uuid, "active")
    assert active["last_error"] is None
    assert active["power_state"] == "power on"
    cd = bmc.system(system, "/VirtualMedia/Cd")
    assert (cd["Inserted"], cd["Image"]) == (True, iso)
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Cd"

    assert provision(client, uuid, "deleted").status_code == 202
    undeployed = wait_for_state(client, uuid, "available")
    assert undeployed["power_state"] == "power off"
    assert bmc.system(system, "/VirtualMedia/Cd")["Inserted"] is False
    assert get_node(client, uuid)["instance_info"] == {}


def test_the_ramdisk_deploy_refuses_an_image_beside_the_iso_and_a_boot_that_cannot(
    stack: Stack, bmc: Bmc, images: str
) -> None:
    client = stack.client
    node = create_node(
        client,
        driver="redfish",
        driver_info=bmc.driver_info(bmc.take()),
        boot_interface="redfish-virtual-media",
        deploy_interface="ramdisk",
        instance_info={"boot_iso": f"{images}/live.iso", "image_source": "http://i/x.img"},
    )
    checked = client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST).json()
    assert checked["deploy"]["result"] is False
    assert "cannot both be set" in checked["deploy"]["reason"]
    ipxe = create_node(
        client,
        driver="redfish",
        driver_info=bmc.driver_info(bmc.take()),
        boot_interface="ipxe",
        deploy_interface="ramdisk",
        instance_info={"boot_iso": f"{images}/live.iso"},
    )
    checked = client.get(f"/v1/nodes/{ipxe['uuid']}/validate", headers=LATEST).json()
    assert checked["deploy"]["result"] is False
    assert "ipxe cannot" in checked["deploy"]["reason"]
    unknown = client.patch(
        f"/v1/nodes/{ipxe['uuid']}",
        json=[{"op": "replace", "path": "/deploy_interface", "value": "bootc"}],
        headers=LATEST,
    )
    assert unknown.status_code == 400
    assert "bootc" in error_text(unknown)
