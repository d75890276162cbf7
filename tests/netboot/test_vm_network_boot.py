"""A QEMU virtual machine network-boots through metalforge, from its firmware, as a server would.

The machine's NIC ROM (iPXE) gets an address from a real dnsmasq on the
lab's bridge, configured as docs/booting.md tells operators, and is handed
``boot.ipxe`` on metalforge's agents' endpoint. metalforge gives the node
being cleaned its script; the script loads the kernel and ramdisk metalforge
fetched and serves; the ramdisk (a tiny stand-in for the agent:
``metalforge_lab.tiny_ramdisk``) takes an address and looks itself up at the
``ipa-api-url`` it was given, with the ``BOOTIF`` it was given, and gets its
node and its token, as the agent does. The node's power is ``fake``: the test
powers the machine on.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from metalforge.config import load_settings
from metalforge_lab import namespaces, tiny_ramdisk, vm
from metalforge_lab.ports import free_port
from tests.support.api import LATEST, create_node, provision, wait_for_state
from tests.support.stack import FAST_CONDUCTOR, LiveServer, Stack, start_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

IN_CI = bool(os.environ.get("CI"))
MAC = "52:54:00:4d:46:01"
BOOT_TIMEOUT = 300.0
"""Seconds from power-on to the ramdisk's lookup under software emulation, on a busy machine."""


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


@pytest.fixture
def stack(
    bridge: namespaces.Bridge, ramdisk: tiny_ramdisk.TinyRamdisk, tmp_path: Path
) -> Iterator[tuple[Stack, str]]:
    agent_port = free_port()
    settings = load_settings(
        database={"url": f"sqlite:///{tmp_path}/metalforge.sqlite"},
        api={"port": free_port(), "agent_host": bridge.address, "agent_port": agent_port},
        inspector={"enabled": False},
        conductor={
            **FAST_CONDUCTOR,
            "hostname": "test-conductor",
            "netboot": {
                "image_cache_dir": str(tmp_path / "boot-images"),
                "image_dirs": [str(ramdisk.kernel.parent)],
                "kernel_append": "console=ttyS0 panic=-1",
            },
        },
    )
    running = start_stack(settings)
    server = LiveServer(running)
    server.start()
    try:
        yield running, f"http://{bridge.address}:{agent_port}"
    finally:
        server.stop()
        running.stop()


@pytest.fixture
def dhcp(bridge: namespaces.Bridge, stack: tuple[Stack, str], tmp_path: Path) -> Iterator[Path]:
    """dnsmasq on the bridge, as docs/booting.md configures it (iPXE clients get boot.ipxe)."""
    _stack, agents_url = stack
    network = bridge.network
    log = tmp_path / "dnsmasq.log"
    process = subprocess.Popen(
        [
            "dnsmasq",
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--port=0",
            f"--interface={bridge.name}",
            "--bind-interfaces",
            "--except-interface=lo",
            "--no-ping",
            f"--dhcp-range={network.network_address + 100},{network.network_address + 200},10m",
            f"--dhcp-leasefile={tmp_path / 'leases'}",
            "--dhcp-match=set:ipxe,175",
            f"--dhcp-boot=tag:ipxe,{agents_url}/boot.ipxe",
            "--log-dhcp",
            f"--log-facility={log}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield log
    finally:
        process.terminate()
        process.wait(10)


def test_a_node_being_cleaned_network_boots_and_its_ramdisk_reaches_metalforge(
    bridge: namespaces.Bridge,
    stack: tuple[Stack, str],
    dhcp: Path,
    ramdisk: tiny_ramdisk.TinyRamdisk,
    tmp_path: Path,
) -> None:
    running, agents_url = stack
    client = running.client
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

    tap = f"mfvt{os.getpid() % 100000}"
    machine = vm.NetbootVm(tap, MAC, bridge.name, tmp_path / "console.log")
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
    assert f"ipa-api-url={agents_url}" in lines["cmdline"], console[-2000:]
    assert f"BOOTIF={MAC}" in lines["cmdline"]
    assert "console=ttyS0" in lines["cmdline"]
    status, _, body = lines["lookup"].partition(" ")
    assert status == "ok", console[-2000:]
    found = json.loads(body)
    assert found["node"]["uuid"] == node["uuid"]
    assert found["config"]["agent_token"]  # the first lookup of this boot receives it
    assert "DHCPACK" in dhcp.read_text()
