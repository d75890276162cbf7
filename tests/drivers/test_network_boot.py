"""``http`` boot asks for UEFI HTTP boot only where the BMC offers it, and says so if not.

The fake management interface offers ``pxe`` and ``disk`` only, like an
IPMI BMC: a node with the ``http`` boot interface then boots from the
network through ``pxe``, and its history tells the operator why.
The device each boot interface asks a BMC for is checked against a
management interface that records the requests (sushy-tools, the lab's
Redfish BMC, turns ``UefiHttp`` without a URI into ``Pxe`` before anyone
can see it).
"""

from __future__ import annotations

from typing import Any

import pytest

from metalforge.db.models import Node
from metalforge.drivers.base import Interface, ManagementInterface, ReadOnlyTask
from metalforge.drivers.ipxe import IpxeHttpBoot
from metalforge.drivers.pxe import HttpBoot, PxeBoot
from tests.support.api import LATEST, create_node, provision, wait_for_state
from tests.support.stack import Stack


def test_http_boot_without_a_uefi_http_device_falls_back_to_pxe_and_says_so(
    stack: Stack,
) -> None:
    client = stack.client
    node = create_node(client, name="httpboot", boot_interface="http", deploy_interface="direct")
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    assert provision(client, node["uuid"], "provide").status_code == 202
    waiting = wait_for_state(client, node["uuid"], "clean wait")
    assert waiting["boot_interface"] == "http"
    assert waiting["driver_internal_info"]["fake_boot_device"] == "pxe"
    assert waiting["driver_internal_info"]["fake_boot_persistent"] is False
    history = client.get(f"/v1/nodes/{node['uuid']}/history?detail=True", headers=LATEST)
    events = [entry["event"] for entry in history.json()["history"]]
    fallback = "offers no UEFI HTTP boot device; booting from the network (pxe)"
    assert any(fallback in event for event in events)
    assert provision(client, node["uuid"], "abort").status_code == 202
    wait_for_state(client, node["uuid"], "clean failed")


def test_every_network_boot_interface_is_listed_for_the_real_hardware_types(
    stack: Stack,
) -> None:
    for driver in ("redfish", "ipmi", "fake-hardware"):
        answer = stack.client.get(f"/v1/drivers/{driver}", headers=LATEST)
        if answer.status_code == 404:  # not enabled in this stack
            continue
        enabled = answer.json()["enabled_boot_interfaces"]
        assert {"pxe", "ipxe", "http", "http-ipxe"} <= set(enabled), (driver, enabled)


class _Bmc(ManagementInterface):
    """Records the boot devices asked for; offers ``devices``."""

    name = "recording"

    def __init__(self, devices: list[str]) -> None:
        self.devices = devices
        self.asked: list[tuple[str, bool]] = []

    def validate(self, task: Any) -> None:
        return None

    def get_boot_device(self, task: Any) -> dict[str, Any]:
        return {}

    def set_boot_device(self, task: Any, device: str, persistent: bool = False) -> None:
        self.asked.append((device, persistent))

    def supported_boot_devices(self, task: Any) -> list[str]:
        return list(self.devices)


class _Task(ReadOnlyTask):
    def __init__(self, management: _Bmc) -> None:
        super().__init__(Node(uuid="00000000-0000-4000-8000-0000000000aa", driver="redfish"))
        self.management = management
        self.records: list[str] = []

    def interface(self, family: str) -> Interface:
        assert family == "management"
        return self.management

    def record(self, event_type: str, event: str, severity: str = "INFO") -> None:
        self.records.append(event)


@pytest.mark.parametrize(
    ("boot", "offered", "asked"),
    [
        (PxeBoot(), ["pxe", "disk", "uefihttp"], "pxe"),
        (HttpBoot(), ["pxe", "disk", "uefihttp"], "uefihttp"),
        (HttpBoot(), ["pxe", "disk"], "pxe"),
    ],
)
def test_the_ramdisk_boot_asks_for_the_network_device_the_interface_means(
    boot: PxeBoot, offered: list[str], asked: str
) -> None:
    bmc = _Bmc(offered)
    task = _Task(bmc)
    boot.prepare_ramdisk(task)
    assert bmc.asked == [(asked, False)]
    fell_back = boot.http_boot and asked == "pxe"
    assert bool(task.records) == fell_back, task.records
    boot.prepare_instance(task)
    assert bmc.asked[-1] == ("disk", True)


def test_http_ipxe_is_ipxe_through_uefi_http_boot() -> None:
    assert IpxeHttpBoot.name == "http-ipxe"
    assert IpxeHttpBoot.http_boot
