"""Turning a ramdisk's report into properties and ports (pure rules)."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from metalforge.conductor.inspection_report import (
    GIB,
    KnownPort,
    ReportRejected,
    bmc_addresses_of,
    check_shape,
    macs_of,
    normalise_mac,
    process,
)
from metalforge.config import InspectionSettings

PXE = "52:54:00:00:00:01"
OTHER = "52:54:00:00:00:02"


def report(**inventory: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cpu": {"count": 16, "architecture": "x86_64"},
        "memory": {"total": 64 * GIB, "physical_mb": 65536},
        "disks": [
            {"name": "/dev/sdb", "size": 2000 * GIB, "serial": "B"},
            {"name": "/dev/sda", "size": 480 * GIB, "serial": "A"},
            {"name": "/dev/sdc", "size": 1 * GIB, "serial": "C"},
        ],
        "interfaces": [
            {"name": "eth0", "mac_address": PXE.upper(), "ipv4_address": "192.0.2.10"},
            {"name": "eth1", "mac_address": OTHER, "ipv4_address": None},
            {"name": "lo", "mac_address": "00:00:00:00:00:00", "ipv4_address": "127.0.0.1"},
        ],
        "boot": {"current_boot_mode": "uefi", "pxe_interface": f"01-{PXE.replace(':', '-')}"},
        "bmc_address": "192.0.2.200",
    }
    base.update(inventory)
    return {"inventory": base, "logs": "bG9ncw==", "error": None, "extra_plugin": {"x": 1}}


SETTINGS = InspectionSettings()


def test_properties_are_integers_and_local_gb_leaves_a_gib() -> None:
    outcome = process(report(), {"capabilities": "boot_mode:uefi"}, [], SETTINGS)
    assert outcome.properties == {
        "capabilities": "boot_mode:uefi",
        "cpu_arch": "x86_64",
        "cpus": 16,
        "memory_mb": 65536,
        "local_gb": 479,  # the smallest disk of at least 4 GiB, less one GiB
    }


def test_root_device_hints_choose_the_disk() -> None:
    outcome = process(report(), {"root_device": {"serial": "B"}}, [], SETTINGS)
    assert outcome.properties["local_gb"] == 1999
    with pytest.raises(ReportRejected, match="root_device hints"):
        process(report(), {"root_device": {"serial": "Z"}}, [], SETTINGS)


def test_the_ramdisks_root_disk_guess_is_used_without_hints() -> None:
    data = report()
    data["root_disk"] = {"name": "/dev/sdb", "size": 2000 * GIB}
    assert process(data, {}, [], SETTINGS).properties["local_gb"] == 1999
    spacing_off = InspectionSettings(disk_partitioning_spacing=False)
    assert process(data, {}, [], spacing_off).properties["local_gb"] == 2000


def test_memory_falls_back_to_total_bytes_and_is_required() -> None:
    assert process(report(memory={"total": 8 * GIB}), {}, [], SETTINGS).properties["memory_mb"] == (
        8 * 1024
    )
    with pytest.raises(ReportRejected, match="memory"):
        process(report(memory={}), {}, [], SETTINGS)


def test_architecture_is_required() -> None:
    with pytest.raises(ReportRejected, match="architecture"):
        process(report(cpu={"count": 4}), {}, [], SETTINGS)


def test_the_ramdisks_own_error_fails_processing() -> None:
    data = report()
    data["error"] = "collector exploded"
    with pytest.raises(ReportRejected, match="collector exploded"):
        process(data, {}, [], SETTINGS)


def test_pxe_mode_creates_only_the_booting_port() -> None:
    outcome = process(report(), {}, [], SETTINGS)
    assert outcome.create_ports == ((PXE, True),)
    assert outcome.plugin_data["macs"] == [PXE]
    assert "logs" not in outcome.plugin_data
    assert outcome.plugin_data["extra_plugin"] == {"x": 1}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("all", ((PXE, True), (OTHER, False))),
        ("active", ((PXE, True),)),
        ("disabled", ()),
    ],
)
def test_add_ports_modes(
    mode: Literal["all", "active", "disabled"], expected: tuple[tuple[str, bool], ...]
) -> None:
    settings = InspectionSettings(add_ports=mode)
    assert process(report(), {}, [], settings).create_ports == expected


def test_without_a_booting_nic_every_nic_gets_a_pxe_port() -> None:
    outcome = process(report(boot={}), {}, [], SETTINGS)
    assert outcome.create_ports == ((PXE, True), (OTHER, True))


def test_existing_ports_are_kept_and_their_pxe_flag_corrected() -> None:
    ports = [KnownPort(PXE, False), KnownPort(OTHER, True), KnownPort("52:54:00:00:00:09", True)]
    outcome = process(report(), {}, ports, SETTINGS)
    assert outcome.create_ports == ()
    assert outcome.set_pxe == {PXE: True, OTHER: False, "52:54:00:00:00:09": False}
    assert outcome.delete_ports == ()
    present = InspectionSettings(keep_ports="present")
    assert process(report(), {}, ports, present).delete_ports == ("52:54:00:00:00:09",)
    added = InspectionSettings(keep_ports="added")
    assert process(report(), {}, ports, added).delete_ports == (OTHER, "52:54:00:00:00:09")


def test_a_mac_of_another_nodes_port_is_not_taken() -> None:
    outcome = process(report(), {}, [KnownPort(PXE, True, mine=False)], SETTINGS)
    assert outcome.create_ports == ()
    assert any("another node" in w for w in outcome.warnings)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([], "JSON object"),
        ({}, "no inventory"),
        ({"inventory": {"interfaces": []}}, "no interfaces"),
        ({"inventory": {"interfaces": [{"name": "eth0"}]}}, "mac_address"),
        ({"inventory": {"interfaces": [{"mac_address": PXE}], "cpu": 4}}, "cpu"),
        ({"inventory": {"interfaces": [{"mac_address": PXE}], "disks": {}}}, "disks"),
        ({"inventory": {"interfaces": [{"mac_address": PXE}], "bmc_address": 7}}, "bmc_address"),
    ],
)
def test_malformed_reports_are_rejected(data: object, reason: str) -> None:
    with pytest.raises(ReportRejected, match=reason):
        check_shape(data)


def test_lookup_information() -> None:
    data = report()
    assert macs_of(data) == [PXE, OTHER, "00:00:00:00:00:00"]
    assert bmc_addresses_of(data) == ["192.0.2.200"]
    assert bmc_addresses_of(report(bmc_address="0.0.0.0")) == []
    assert normalise_mac("01-AA-BB-CC-DD-EE-FF") == "aa:bb:cc:dd:ee:ff"
    assert normalise_mac("not a mac") is None


def test_keep_added_with_ports_disabled_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="keep_ports"):
        InspectionSettings(add_ports="disabled", keep_ports="added")


def test_a_node_without_a_disk_to_install_on_gets_local_gb_0() -> None:
    assert process(report(disks=[]), {}, [], SETTINGS).properties["local_gb"] == 0
    tiny = [{"name": "/dev/vda", "size": 32 * 1024**2}]
    assert process(report(disks=tiny), {}, [], SETTINGS).properties["local_gb"] == 0


def test_a_report_with_absurdly_many_interfaces_is_rejected() -> None:
    nics = [{"name": f"eth{i}", "mac_address": PXE} for i in range(1025)]
    with pytest.raises(ReportRejected, match="at most 1024"):
        check_shape({"inventory": {"interfaces": nics}})


def test_a_report_cannot_make_a_new_port_the_pxe_port_of_a_node_that_boots_from_one() -> None:
    """The report is unauthenticated: naming an unknown MAC as its boot interface, it
    would otherwise become the node's PXE port (and win the agent's lookup)."""
    ports = [KnownPort(OTHER, True)]
    outcome = process(report(), {}, ports, SETTINGS)
    assert (PXE, False) in outcome.create_ports
    assert all(not pxe for _, pxe in outcome.create_ports)
    assert outcome.set_pxe == {}
    assert any("not a port of the node" in w for w in outcome.warnings)
    # A node with no booting port yet takes the reported one, as before.
    assert (PXE, True) in process(report(), {}, [], SETTINGS).create_ports
