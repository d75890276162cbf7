"""QEMU machines behind a Redfish BMC, provisioned by metalforge as servers would be.

The lab's Redfish emulator drives a real QEMU machine (``machine`` in its
system): metalforge's conductor sets the boot device and powers the machine
on through Redfish, and the machine boots the agent's ramdisk from its
firmware -- over the network through metalforge's DHCP service and iPXE
scripts (``ipxe``), or from the ISO metalforge built, which the BMC
downloaded and put in the machine's CD drive (``redfish-virtual-media``).
The ramdisk (``metalforge_lab.tiny_ramdisk``) takes an address from
metalforge's DHCP and looks itself up, as the agent does.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from metalforge_lab import namespaces, tiny_ramdisk
from metalforge_lab.ports import free_port
from metalforge_lab.redfish_emulator import EmulatorProcess, FakeSystem
from tests.support.api import LATEST, provision, wait_for_state, wait_until
from tests.support.vm_lab import (
    BOOT_TIMEOUT,
    MAC,
    DnsmasqLog,
    all_in_one,
    check_lookup,
    lab_settings,
    node_being_cleaned,
    ramdisk_report,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def bmc(bridge: namespaces.Bridge, tmp_path: Path) -> Iterator[tuple[EmulatorProcess, Path]]:
    """A Redfish BMC whose one system is a QEMU machine on the bridge; its console file."""
    console = tmp_path / "console.log"
    system = FakeSystem(
        uuid=str(uuid.uuid4()),
        name="vm-1",
        macs=[MAC],
        machine={
            "tap": f"mfrt{os.getpid() % 100000}",
            "bridge": bridge.name,
            "console": str(console),
        },
    )
    emulator = EmulatorProcess(tmp_path / "bmc", free_port(), [system])
    emulator.start()
    try:
        yield emulator, console
    finally:
        emulator.stop()


def _wait_for_report(console: Path) -> dict[str, str]:
    done = f"{tiny_ramdisk.MARK} done"
    wait_until(
        "the ramdisk to report",
        lambda: console.exists() and done in console.read_text(errors="replace"),
        timeout=BOOT_TIMEOUT,
    )
    return ramdisk_report(console.read_text(errors="replace"))


@pytest.mark.parametrize("boot", ["ipxe", "redfish-virtual-media"])
def test_metalforge_powers_the_machine_on_through_redfish_and_it_boots_the_ramdisk(
    bridge: namespaces.Bridge,
    ramdisk: tiny_ramdisk.TinyRamdisk,
    dnsmasq_log: DnsmasqLog,
    bmc: tuple[EmulatorProcess, Path],
    tmp_path: Path,
    boot: str,
) -> None:
    emulator, console = bmc
    settings = lab_settings(bridge, ramdisk.kernel.parent, tmp_path)
    system_id = emulator.system_path(emulator.systems[0].uuid)
    with all_in_one(settings) as running:
        node_uuid = node_being_cleaned(
            running.client,
            ramdisk,
            driver="redfish",
            boot_interface=boot,
            driver_info={"redfish_address": emulator.address, "redfish_system_id": system_id},
        )
        report = _wait_for_report(console)
        http_url = str(settings.conductor.netboot.http_url)
        # Network boot names the interface it booted from; virtual media cannot.
        check_lookup(report, node_uuid, http_url, bootif=MAC if boot == "ipxe" else None)
        assert dnsmasq_log.saw("DHCPACK", MAC)  # the ramdisk's own DHCP, from metalforge
        if boot == "redfish-virtual-media":
            node = running.client.get(f"/v1/nodes/{node_uuid}", headers=LATEST).json()
            inserted = node["driver_internal_info"]["redfish_virtual_media"]
            assert inserted.startswith(f"{http_url}/boot/images/")
            assert not dnsmasq_log.saw("PXEClient")  # the firmware did not network-boot
        assert provision(running.client, node_uuid, "abort").status_code == 202
        wait_for_state(running.client, node_uuid, "clean failed")
