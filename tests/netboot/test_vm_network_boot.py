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
import ipaddress
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.config import Settings, load_settings
from metalforge.pxe_filter.setup import build_filter_host
from metalforge_lab import namespaces, tiny_ramdisk, vm
from metalforge_lab.ports import free_port
from tests.support.api import LATEST, create_node, provision, wait_for_state, wait_until
from tests.support.stack import FAST_CONDUCTOR, LiveServer, Stack, start_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

IN_CI = bool(os.environ.get("CI"))
MAC = "52:54:00:4d:46:01"
STRANGER = "52:54:00:4d:46:02"
BOOT_TIMEOUT = 300.0
"""Seconds from power-on to the ramdisk's lookup under software emulation, on a busy machine."""


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI must boot the VM: {reason}")
    pytest.skip(reason)


def _require() -> None:
    reason = vm.available()
    if os.geteuid() != 0:
        reason = "a VM on a bridge needs root"
    elif shutil.which("dnsmasq") is None:
        reason = "dnsmasq is not installed"
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"CI must boot the VM: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def ramdisk(tmp_path_factory: pytest.TempPathFactory) -> tiny_ramdisk.TinyRamdisk:
    _require()
    return tiny_ramdisk.build(tmp_path_factory.mktemp("tiny-ramdisk"))


@pytest.fixture
def bridge() -> Iterator[namespaces.Bridge]:
    subnet = ipaddress.IPv4Network(namespaces.free_subnet(seed=os.getpid() + 32))
    created = namespaces.Bridge(f"mfvm{os.getpid() % 100000}", subnet)
    created.create()
    try:
        yield created
    finally:
        created.delete()


class DnsmasqLog(logging.Handler):
    """dnsmasq's lines as metalforge logs them, for the test to wait on."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def saw(self, *words: str) -> bool:
        return any(all(word in line for word in words) for line in list(self.lines))


@pytest.fixture
def dnsmasq_log() -> Iterator[DnsmasqLog]:
    handler = DnsmasqLog()
    logger = logging.getLogger("metalforge.dhcp.dnsmasq")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _settings(
    bridge: namespaces.Bridge, ramdisk_dir: Path, tmp_path: Path, **dhcp: Any
) -> Settings:
    """An all-in-one's settings: the dnsmasq PXE filter and metalforge's DHCP service on
    the bridge, as docs/booting.md has an operator set them."""
    network = bridge.network
    return load_settings(
        state_dir=str(tmp_path / "state"),
        database={"url": f"sqlite:///{tmp_path}/metalforge.sqlite"},
        api={"port": free_port(), "agent_host": bridge.address, "agent_port": free_port()},
        inspector={"enabled": False},
        conductor={
            **FAST_CONDUCTOR,
            "hostname": "test-conductor",
            "netboot": {
                "image_cache_dir": str(tmp_path / "boot-images"),
                "image_dirs": [str(ramdisk_dir)],
                "kernel_append": "console=ttyS0 panic=-1",
            },
        },
        pxe_filter={"driver": "dnsmasq", "dnsmasq_hostsdir": str(tmp_path / "hostsdir")},
        dhcp={
            "enabled": True,
            "interface": bridge.name,
            "range_start": str(network.network_address + 100),
            "range_end": str(network.network_address + 200),
            "run_as": "root",  # the test's directories are root's alone
            **dhcp,
        },
    )


@contextlib.contextmanager
def _all_in_one(settings: Settings) -> Iterator[Stack]:
    """The API on the agents' endpoint, a conductor, the PXE filter and the DHCP service."""
    running = start_stack(settings)
    server = LiveServer(running)
    filter_host = build_filter_host(settings, running.db)
    assert filter_host is not None
    try:
        server.start()
        filter_host.start()
        yield running
    finally:
        filter_host.stop()
        server.stop()
        running.stop()


def _node_being_cleaned(client: Any, ramdisk: tiny_ramdisk.TinyRamdisk) -> str:
    node = create_node(
        client,
        boot_interface="ipxe",
        deploy_interface="direct",
        driver_info={
            "deploy_kernel": str(ramdisk.kernel),
            "deploy_ramdisk": str(ramdisk.initramfs),
        },
    )
    port = client.post(
        "/v1/ports", json={"address": MAC, "node_uuid": node["uuid"]}, headers=LATEST
    )
    assert port.status_code == 201, port.text
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    assert provision(client, node["uuid"], "provide").status_code == 202
    assert wait_for_state(client, node["uuid"], "clean wait")["last_error"] is None
    return str(node["uuid"])


def _boot_to_lookup(
    mac: str,
    bridge: namespaces.Bridge,
    tmp_path: Path,
    *,
    uefi: bool = False,
    nic_rom: bool = True,
) -> dict[str, str]:
    """Power a VM on and wait for its ramdisk's report; its MARK lines by name."""
    tap = f"mfvt{os.getpid() % 100000}"
    machine = vm.NetbootVm(
        tap, mac, bridge.name, tmp_path / "console.log", uefi=uefi, nic_rom=nic_rom
    )
    machine.power_on()
    try:
        console = machine.wait_for_console(f"{tiny_ramdisk.MARK} done", BOOT_TIMEOUT)
    finally:
        machine.power_off()
    lines = {
        line.split(" ", 2)[1]: line.split(" ", 2)[2]
        for line in console.splitlines()
        if line.startswith(tiny_ramdisk.MARK + " ") and len(line.split(" ", 2)) == 3
    }
    lines["console"] = console[-2000:]
    return lines


def _check_lookup(lines: dict[str, str], node_uuid: str, agents_url: str) -> None:
    assert f"ipa-api-url={agents_url}" in lines["cmdline"], lines["console"]
    assert f"BOOTIF={MAC}" in lines["cmdline"]
    assert "console=ttyS0" in lines["cmdline"]
    status, _, body = lines["lookup"].partition(" ")
    assert status == "ok", lines["console"]
    found = json.loads(body)
    assert found["node"]["uuid"] == node_uuid
    assert found["config"]["agent_token"]  # the first lookup of this boot receives it


def test_a_node_being_cleaned_network_boots_and_its_ramdisk_reaches_metalforge(
    bridge: namespaces.Bridge,
    ramdisk: tiny_ramdisk.TinyRamdisk,
    dnsmasq_log: DnsmasqLog,
    tmp_path: Path,
) -> None:
    """metalforge's DHCP service answers the node being cleaned and nobody else."""
    settings = _settings(bridge, ramdisk.kernel.parent, tmp_path)
    with _all_in_one(settings) as running:
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

        node_uuid = _node_being_cleaned(running.client, ramdisk)
        lines = _boot_to_lookup(MAC, bridge, tmp_path)
        _check_lookup(lines, node_uuid, str(settings.conductor.netboot.http_url))
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
        _missing("OVMF is not installed (Debian's ovmf)")
    settings = _settings(bridge, ramdisk.kernel.parent, tmp_path)
    with _all_in_one(settings) as running:
        node_uuid = _node_being_cleaned(running.client, ramdisk)
        lines = _boot_to_lookup(MAC, bridge, tmp_path, uefi=True, nic_rom=False)
        _check_lookup(lines, node_uuid, str(settings.conductor.netboot.http_url))
    assert dnsmasq_log.saw("vendor class: PXEClient:Arch:00007")  # x86-64 UEFI asked
    assert dnsmasq_log.saw("option: 67 bootfile-name", "snponly.efi")
    assert dnsmasq_log.saw("sent /usr/lib/ipxe/snponly.efi to")  # over TFTP


def test_proxy_dhcp_tells_the_node_what_to_boot_beside_another_dhcp_server(
    bridge: namespaces.Bridge,
    ramdisk: tiny_ramdisk.TinyRamdisk,
    dnsmasq_log: DnsmasqLog,
    tmp_path: Path,
) -> None:
    """Another server gives the addresses; metalforge's proxy DHCP only says what to boot."""
    settings = _settings(
        bridge, ramdisk.kernel.parent, tmp_path, mode="proxy", proxy_subnet=str(bridge.network)
    )
    with _addresses_only(bridge, tmp_path), _all_in_one(settings) as running:
        node_uuid = _node_being_cleaned(running.client, ramdisk)
        lines = _boot_to_lookup(MAC, bridge, tmp_path)
        _check_lookup(lines, node_uuid, str(settings.conductor.netboot.http_url))
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
