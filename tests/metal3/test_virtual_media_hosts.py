"""BMO's calls for hosts booted without a provisioning network, from registration to deletion.

Three BareMetalHosts as Metal3 writes them (``redfish-virtualmedia://``,
``idrac-virtualmedia://``, ``redfish-uefihttp://``), inspected out of band
("fast" inspection) and provisioned with a live ISO (the ``ramdisk`` deploy),
automated cleaning disabled: the path that needs no agent. Every call is
BMO's (``tests.metal3.bmo``), against the lab's Redfish BMC (an iDRAC for the
Dell host).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge_lab.redfish_emulator import FakeSystem
from tests.metal3.bmo import Bmo
from tests.support.api import wait_for_state, wait_until
from tests.support.redfish import Bmc, fake_system, running_stack, serve_directory, start_bmc
from tests.support.stack import Stack

USER, PASSWORD = "metal3", "bmc-s3cret"

HOSTS: dict[str, dict[str, Any]] = {
    "redfish-virtualmedia": {
        "driver": "redfish",
        "boot_interface": "redfish-virtual-media",
        "firmware_interface": "redfish",
        "raid_interface": "redfish",
    },
    "idrac-virtualmedia": {
        "driver": "idrac",
        "boot_interface": "idrac-redfish-virtual-media",
        "bios_interface": "idrac-redfish",
        "firmware_interface": "redfish",
        "management_interface": "idrac-redfish",
        "power_interface": "idrac-redfish",
        "raid_interface": "idrac-redfish",
        "vendor_interface": "idrac-redfish",
    },
    "redfish-uefihttp": {
        "driver": "redfish",
        "boot_interface": "redfish-https",
        "firmware_interface": "redfish",
        "raid_interface": "redfish",
    },
}
"""What BMO's ``pkg/hardwareutils/bmc`` creates for each BMC address scheme."""


_CONTROLLER = {
    "id": "RAID.Integrated.1",
    "name": "PERC H755",
    "drives": [
        {"Id": f"Disk.Bay.{i}", "Name": f"Disk {i}", "CapacityBytes": 480 * 1024**3,
         "MediaType": "SSD", "Protocol": "SAS"}
        for i in range(4)
    ],
}  # fmt: skip
"""The RAID controller of the host Metal3 asks hardware RAID of."""


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    systems = [
        dataclasses.replace(fake_system(disks_gib=(100,)), dell=dell)
        for dell in (False, True, False)
    ]
    systems.append(dataclasses.replace(fake_system(disks_gib=(100,)), storage=_CONTROLLER))
    yield from start_bmc(
        tmp_path_factory.mktemp("bmo-bmc"),
        systems=systems,
        users={USER: PASSWORD},
        event_service=True,
    )


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    www: Path = tmp_path_factory.mktemp("www")
    (www / "live.iso").write_bytes(b"\0" * 4096)
    (www / "ipa.iso").write_bytes(b"\0" * 4096)
    yield from serve_directory(www)


@pytest.fixture
def stack(sqlite_url: str) -> Iterator[Stack]:
    yield from running_stack(sqlite_url, "redfish", "idrac")


def _register(bmo: Bmo, bmc: Bmc, system: FakeSystem, scheme: str) -> dict[str, Any]:
    """Registration: no node by name, none by MAC; create it, its port, manage it."""
    name = f"metal3~{scheme}"
    mac = system.macs[0]
    for ident in (name, scheme):
        assert bmo.get(f"/v1/nodes/{ident}").status_code == 404
    ports = bmo.get(f"/v1/ports?address={mac}&fields=node_uuid%2Cuuid%2Caddress")
    assert ports.json()["ports"] == []
    body = {
        **HOSTS[scheme],
        "name": name,
        "driver_info": {
            "redfish_address": bmc.address,
            "redfish_username": USER,
            "redfish_password": PASSWORD,
            "redfish_system_id": bmc.emulator.system_path(system.uuid),
        },
        "inspect_interface": "redfish",
        "disable_power_off": False,
        "properties": {"capabilities": "boot_mode:uefi", "cpu_arch": "x86_64"},
    }
    created = bmo.post("/v1/nodes", body)
    assert created.status_code == 201, created.text
    uuid = created.json()["uuid"]
    port = bmo.post("/v1/ports", {"node_uuid": uuid, "address": mac, "pxe_enabled": True})
    assert port.status_code == 201, port.text
    bmo.provision(uuid, "manage")
    wait_for_state(bmo.client, uuid, "manageable")
    return bmo.node(uuid)


def _inspect(bmo: Bmo, node: dict[str, Any]) -> dict[str, Any]:
    """BMO starts the first inspection when the inventory is 404, then reads it."""
    uuid = node["uuid"]
    assert bmo.get(f"/v1/nodes/{uuid}/inventory").status_code == 404
    node = bmo.update(node, {"/inspect_interface": "redfish"})
    bmo.provision(uuid, "inspect")
    wait_for_state(bmo.client, uuid, "manageable")
    inventory = bmo.get(f"/v1/nodes/{uuid}/inventory")
    assert inventory.status_code == 200, inventory.text
    found = inventory.json()["inventory"]
    assert isinstance(found["memory"]["physical_mb"], int)
    assert isinstance(found["cpu"]["count"], int)
    assert all(isinstance(i["mac_address"], str) for i in found["interfaces"])
    assert all(isinstance(d["size"], int) for d in found["disks"])
    assert not isinstance(found["cpu"].get("frequency", ""), int | float), "BMO reads a string"
    return bmo.node(uuid)


def test_preparing_a_redfish_host_with_hardware_raid_and_reading_its_settings(
    stack: Stack, bmc: Bmc, images: str
) -> None:
    """BMO's Preparing for a ``redfish-virtualmedia://`` host whose spec asks for RAID:
    the target set with ``PUT .../states/raid``, then manual cleaning with the RAID steps;
    and what its firmware-settings controllers read (BIOS with its registry, firmware)."""
    system = bmc.take(lambda s: s.storage is not None)
    bmo = Bmo(stack.client)
    node = _register(bmo, bmc, system, "redfish-virtualmedia")
    uuid = node["uuid"]
    node = bmo.update(node, {"/driver_info/deploy_iso": f"{images}/ipa.iso"})
    node = bmo.update(node, {"/raid_interface": "redfish"})
    target = {
        "logical_disks": [
            {"size_gb": 400, "raid_level": "1", "volume_name": "root", "is_root_volume": True,
             "controller": "RAID.Integrated.1", "physical_disks": ["Disk.Bay.0", "Disk.Bay.1"]},
            {"size_gb": 400, "raid_level": "0", "volume_name": "data"},
        ]
    }  # fmt: skip
    answer = bmo.put(f"/v1/nodes/{uuid}/states/raid", target)
    assert answer.status_code == 204, answer.text
    steps = [
        {"interface": "raid", "step": "delete_configuration"},
        {"interface": "raid", "step": "create_configuration"},
    ]
    bmo.provision(uuid, "clean", clean_steps=steps)
    done = bmo.node(wait_for_state(stack.client, uuid, "manageable")["uuid"])
    assert done["last_error"] is None
    built = {d["name"]: d for d in done["raid_config"]["logical_disks"]}
    assert {name: d["raid_level"] for name, d in built.items()} == {"root": "1", "data": "0"}

    bios = bmo.get(f"/v1/nodes/{uuid}/bios?detail=true")
    assert bios.status_code == 200, bios.text
    for setting in bios.json()["bios"]:
        assert isinstance(setting["name"], str)
        assert isinstance(setting["value"], str | type(None))
        assert isinstance(setting["read_only"], bool | type(None))
    firmware = bmo.get(f"/v1/nodes/{uuid}/firmware")
    assert firmware.status_code == 200, firmware.text
    components = {c["component"] for c in firmware.json()["firmware"]}
    assert "bios" in components

    # A BMCEventSubscription: created through vendor passthru (200, BMO reads Id), deleted
    # with a JSON body on DELETE.
    passthru = f"/v1/nodes/{uuid}/vendor_passthru"
    body = {"Destination": "https://hooks.example/bmc", "Context": "metal3/host",
            "HttpHeaders": [{"X-Token": "abc"}]}  # fmt: skip
    created = bmo.post(f"{passthru}?method=create_subscription", body)
    assert created.status_code == 200, created.text
    ident = created.json()["Id"]
    gone = bmo.delete(f"{passthru}?method=delete_subscription", {"id": ident})
    assert gone.status_code in (200, 202, 204), gone.text


@pytest.mark.parametrize("scheme", list(HOSTS))
def test_a_live_iso_host_from_registration_to_deletion(
    stack: Stack, bmc: Bmc, images: str, scheme: str
) -> None:
    system = bmc.take(lambda s: s.dell == (scheme == "idrac-virtualmedia") and not s.storage)
    bmo = Bmo(stack.client)
    assert bmo.version >= (1, 95)
    node = _register(bmo, bmc, system, scheme)
    uuid = node["uuid"]
    # configureNode: the deploy ISO (no kernel or ramdisk), no automated cleaning.
    node = bmo.update(
        node,
        {
            "/driver_info/deploy_iso": f"{images}/ipa.iso",
            "/driver_info/deploy_kernel": None,
            "/driver_info/deploy_ramdisk": None,
            "/automated_clean": False,
            "/properties/capabilities": "boot_mode:uefi",
        },
    )
    firmware = bmo.get(f"/v1/nodes/{uuid}/firmware")
    assert firmware.status_code == 200, firmware.text
    node = _inspect(bmo, node)

    bmo.provision(uuid, "provide")
    node = bmo.node(wait_for_state(stack.client, uuid, "available")["uuid"])
    live = f"{images}/live.iso"
    node = bmo.update(
        node,
        {
            "/instance_uuid": "0b6f54b3-9d05-4c0e-9a59-3c1d2f8e7a11",
            "/instance_info/capabilities": {},
            "/instance_info/root_device": {},
            "/instance_info/boot_iso": live,
            "/instance_info/image_source": None,
            "/deploy_interface": "ramdisk",
            "/driver_info/force_persistent_boot_device": "Default",
        },
    )
    checked = bmo.get(f"/v1/nodes/{uuid}/validate").json()
    assert checked["boot"]["result"] is True, checked["boot"]
    assert checked["deploy"]["result"] is True, checked["deploy"]
    bmo.provision(uuid, "active", configdrive={})
    active = bmo.node(wait_for_state(stack.client, uuid, "active")["uuid"])
    assert (active["power_state"], active["last_error"]) == ("power on", None)
    media = bmo.get(f"/v1/nodes/{uuid}/vmedia")
    assert media.status_code == 200, media.text
    assert isinstance(media.json(), list)

    # A reboot annotation with mode soft: soft power off (180 s), then on again.
    bmo.power(uuid, "soft power off", timeout=180)
    wait_until("powered off", lambda: bmo.node(uuid)["power_state"] == "power off")
    bmo.power(uuid, "power on")
    wait_until("powered on", lambda: bmo.node(uuid)["power_state"] == "power on")

    # Deprovisioning, then deletion: powered off first, then the node goes.
    bmo.provision(uuid, "deleted")
    node = bmo.node(wait_for_state(stack.client, uuid, "available")["uuid"])
    assert node["instance_uuid"] is None
    bmo.power(uuid, "power off")
    wait_until("powered off", lambda: bmo.node(uuid)["power_state"] == "power off")
    gone = bmo.delete(f"/v1/nodes/{uuid}")
    assert gone.status_code == 204, gone.text
    assert bmo.get(f"/v1/nodes/{uuid}").status_code == 404
