"""The ramdisk's static network settings from ``network_data.json``
(``metalforge_lab.ramdisk_network``); booted for real in ``test_vm_lifecycle_virtual_media``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from metalforge_lab import ramdisk_network
from metalforge_lab.ramdisk_network import NetworkDataError, plan

NICS = {"52:54:00:00:00:01": "ens3", "52:54:00:00:00:02": "ens4"}


def _data(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "links": [
            {"id": "nic0", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01", "mtu": 9000},
            {"id": "nic1", "type": "ethernet", "ethernet_mac_address": "52:54:00:00:00:02"},
            {"id": "vlan10", "type": "vlan", "vlan_link": "nic1", "vlan_id": 10},
        ],
        "networks": [
            {
                "id": "provisioning",
                "type": "ipv4",
                "link": "nic0",
                "ip_address": "10.0.0.5",
                "netmask": "255.255.255.0",
                "routes": [
                    {"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.0.1"}
                ],
            },
            {"id": "storage", "type": "ipv6", "link": "vlan10", "ip_address": "fd00::5",
             "netmask": "ffff:ffff:ffff:ffff::"},
            {"id": "spare", "type": "ipv4_dhcp", "link": "nic1"},
        ],
        "services": [{"type": "dns", "address": "10.0.0.2"}, {"type": "ntp", "address": "x"}],
    }  # fmt: skip
    data.update(overrides)
    return data


def test_links_addresses_routes_and_name_servers_become_ip_commands() -> None:
    steps = plan(_data(), NICS)
    assert steps.commands == [
        ["ip", "link", "set", "ens3", "mtu", "9000"],
        ["ip", "link", "set", "ens3", "up"],
        ["ip", "link", "set", "ens4", "up"],
        ["ip", "link", "add", "link", "ens4", "name", "ens4.10", "type", "vlan", "id", "10"],
        ["ip", "link", "set", "ens4.10", "up"],
        ["ip", "addr", "add", "10.0.0.5/24", "dev", "ens3"],
        ["ip", "route", "add", "0.0.0.0/0", "via", "10.0.0.1", "dev", "ens3"],
        ["ip", "addr", "add", "fd00::5/64", "dev", "ens4.10"],
    ]
    assert steps.dhcp == ["ens4"]
    assert steps.dns == ["10.0.0.2"]


def test_a_mac_in_capitals_names_the_same_nic() -> None:
    data = _data(
        links=[{"id": "nic0", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01".upper()}]
    )
    data["networks"] = data["networks"][:1]
    assert plan(data, NICS).commands[0] == ["ip", "link", "set", "ens3", "up"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"links": "nic0"}, "no list of links"),
        (
            {"links": [{"id": "x", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:09"}]},
            "no interface has MAC",
        ),
        (
            {"links": [{"id": "v", "type": "vlan", "vlan_link": "nope", "vlan_id": 3}]},
            "unknown vlan_link",
        ),
        ({"links": [{"id": "b", "type": "bond"}]}, "bonds are not configured"),
        ({"networks": [{"id": "n", "type": "ipv4", "link": "ghost"}]}, "unknown link"),
        ({"networks": [{"id": "n", "type": "carrier-pigeon", "link": "nic0"}]}, "unknown type"),
        (
            {
                "networks": [
                    {
                        "id": "n",
                        "type": "ipv4",
                        "link": "nic0",
                        "ip_address": "10.0.0.5",
                        "netmask": "255.0.255.0",
                    }
                ]
            },
            "not contiguous",
        ),
    ],
    ids=[
        "links-not-a-list",
        "unknown-mac",
        "vlan-parent",
        "bond",
        "network-link",
        "type",
        "netmask",
    ],
)
def test_what_cannot_be_configured_is_refused_with_the_reason(
    change: dict[str, Any], reason: str
) -> None:
    with pytest.raises(NetworkDataError, match=reason):
        plan(_data(**change), NICS)


def test_a_bad_address_is_refused_before_anything_runs(tmp_path: Path) -> None:
    data = _data()
    data["networks"][0]["ip_address"] = "10.0.0.300"
    with pytest.raises(ValueError, match=r"10\.0\.0\.300"):
        plan(data, NICS)
    (tmp_path / "network_data.json").write_text(json.dumps(data))
    assert ramdisk_network.main(["network_data.py", str(tmp_path / "network_data.json")]) == 1
    (tmp_path / "network_data.json").write_text("{not json")
    assert ramdisk_network.main(["network_data.py", str(tmp_path / "network_data.json")]) == 1
