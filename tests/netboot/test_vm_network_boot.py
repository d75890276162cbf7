"""A QEMU virtual machine network-boots through metalforge, from its firmware, as a server would.

The machine's NIC ROM (iPXE) asks for DHCP on the lab's bridge, where
metalforge runs its DHCP service (a real dnsmasq it configures) behind its
PXE filter: a machine metalforge has nothing for is ignored; the node being
cleaned gets an address and is handed ``boot.ipxe`` on metalforge's agents'
endpoint -- from metalforge's own DHCP, or, in proxy mode, with the address
from another server and only the boot from metalforge. metalforge gives the node
being cleaned its script; the script loads the kernel and ramdisk metalforge
fetched and serves; the ramdisk (a tiny stand-in for the agent:
``metalforge_lab.tiny_ramdisk``) takes an address and looks itself up at the
``ipa-api-url`` it was given, with the ``BOOTIF`` it was given, and gets its
node and its token, as the agent does. The node's power is ``fake``: the test
powers the machine on.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from metalforge_lab import namespaces, tiny_ramdisk, vm
from tests.support.api import wait_until
from tests.support.vm_lab import (
    MAC,
    DnsmasqLog,
    all_in_one,
    boot_to_lookup,
    check_lookup,
    lab_settings,
    missing,
    node_being_cleaned,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STRANGER = "52:54:00:4d:46:02"


def test_a_node_being_cleaned_network_boots_and_its_ramdisk_reaches_metalforge(
    bridge: namespaces.Bridge,
    ramdisk: tiny_ramdisk.TinyRamdisk,
    dnsmasq_log: DnsmasqLog,
    tmp_path: Path,
) -> None:
    """metalforge's DHCP service answers the node being cleaned and nobody else."""
    settings = lab_settings(bridge, ramdisk.kernel.parent, tmp_path)
    with all_in_one(settings) as running:
        # A machine metalforge has nothing for is not answered: its firmware moves on.
        stranger = vm.NetbootVm(
            f"mfvs{os.getpid() % 100000}", STRANGER, bridge.name, tmp_path / "stranger.log"
        )
        stranger.power_on()
        try:
            wait_until(
                "dnsmasq to ignore the stranger",
                lambda: dnsmasq_log.saw("DHCPDISCOVER", STRANGER, "ignored"),
                timeout=60,
            )
        finally:
            stranger.power_off()

        node_uuid = node_being_cleaned(running.client, ramdisk)
        lines = boot_to_lookup(MAC, bridge, tmp_path)
        check_lookup(lines, node_uuid, str(settings.conductor.netboot.http_url))
    assert dnsmasq_log.saw("DHCPACK", MAC)
    assert not dnsmasq_log.saw("DHCPOFFER", STRANGER)


def test_uefi_firmware_without_ipxe_is_handed_it_over_tftp_and_boots_through_it(
    bridge: namespaces.Bridge,
    ramdisk: tiny_ramdisk.TinyRamdisk,
    dnsmasq_log: DnsmasqLog,
    tmp_path: Path,
) -> None:
    """OVMF's own PXE, as a server's UEFI firmware: snponly.efi over TFTP, then iPXE."""
    if not (vm.OVMF_CODE.exists() and vm.OVMF_VARS.exists()):
        missing("OVMF is not installed (Debian's ovmf)")
    settings = lab_settings(bridge, ramdisk.kernel.parent, tmp_path)
    with all_in_one(settings) as running:
        node_uuid = node_being_cleaned(running.client, ramdisk)
        lines = boot_to_lookup(MAC, bridge, tmp_path, uefi=True, nic_rom=False)
        check_lookup(lines, node_uuid, str(settings.conductor.netboot.http_url))
    assert dnsmasq_log.saw("vendor class: PXEClient:Arch:00007")  # x86-64 UEFI asked
    assert dnsmasq_log.saw("option: 67 bootfile-name", "snponly.efi")
    assert dnsmasq_log.saw("sent /usr/lib/ipxe/snponly.efi to")  # over TFTP


def test_uefi_http_boot_loads_ipxe_from_metalforge_over_http_and_boots_through_it(
    bridge: namespaces.Bridge,
    ramdisk: tiny_ramdisk.TinyRamdisk,
    dnsmasq_log: DnsmasqLog,
    tmp_path: Path,
) -> None:
    """OVMF's UEFI HTTP boot (its PXE turned off), as a ``http-ipxe`` node boots: the
    firmware is handed the iPXE binary's URL on metalforge, fetches it over HTTP, and
    iPXE goes on as with any other firmware."""
    if not (vm.OVMF_CODE.exists() and vm.OVMF_VARS.exists()):
        missing("OVMF is not installed (Debian's ovmf)")
    settings = lab_settings(bridge, ramdisk.kernel.parent, tmp_path)
    http_url = str(settings.conductor.netboot.http_url)
    with all_in_one(settings) as running:
        node_uuid = node_being_cleaned(running.client, ramdisk, boot_interface="http-ipxe")
        lines = boot_to_lookup(MAC, bridge, tmp_path, uefi=True, nic_rom=False, http_boot=True)
        check_lookup(lines, node_uuid, http_url)
    assert dnsmasq_log.saw("vendor class: HTTPClient:Arch:00016")  # x86-64 UEFI HTTP boot
    assert dnsmasq_log.saw("bootfile-name", f"{http_url}/boot/firmware/snponly.efi")
    assert not dnsmasq_log.saw("sent /usr/lib/ipxe/snponly.efi to"), "not over TFTP"


def test_proxy_dhcp_tells_the_node_what_to_boot_beside_another_dhcp_server(
    bridge: namespaces.Bridge,
    ramdisk: tiny_ramdisk.TinyRamdisk,
    dnsmasq_log: DnsmasqLog,
    tmp_path: Path,
) -> None:
    """Another server gives the addresses; metalforge's proxy DHCP only says what to boot."""
    settings = lab_settings(
        bridge, ramdisk.kernel.parent, tmp_path, mode="proxy", proxy_subnet=str(bridge.network)
    )
    with _addresses_only(bridge, tmp_path), all_in_one(settings) as running:
        node_uuid = node_being_cleaned(running.client, ramdisk)
        lines = boot_to_lookup(MAC, bridge, tmp_path)
        check_lookup(lines, node_uuid, str(settings.conductor.netboot.http_url))
    # metalforge's answer was the proxy offer naming the script, to an address the other
    # server gave (its range is .50-.99).
    boot_url = f"{settings.conductor.netboot.http_url}/boot.ipxe"
    assert dnsmasq_log.saw("PXE(", MAC, boot_url)
    assert not dnsmasq_log.saw("DHCPOFFER", MAC)


@contextlib.contextmanager
def _addresses_only(bridge: namespaces.Bridge, tmp_path: Path) -> Iterator[None]:
    """The network's own DHCP server: addresses for everyone, nothing about booting."""
    network = bridge.network
    process = subprocess.Popen(
        [
            "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--port=0",
            f"--interface={bridge.name}", "--bind-dynamic", "--except-interface=lo",
            "--no-ping",
            f"--dhcp-range={network.network_address + 50},{network.network_address + 99},10m",
            f"--dhcp-leasefile={tmp_path / 'other-leases'}",
            f"--pid-file={tmp_path / 'other.pid'}",
        ],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield
    finally:
        process.terminate()
        process.wait(10)
