"""The DHCP and TFTP service metalforge runs: a real dnsmasq it configures, in a namespace.

A filter host with ``dhcp.enabled`` starts dnsmasq itself. Machines ask
with busybox's ``udhcpc`` as firmware would: only a node the PXE filter lets
through (being cleaned through ``ipxe``, or inspected) gets an offer, PXE
firmware is told to load iPXE (the BIOS or UEFI binary by its architecture)
and can fetch it over TFTP, UEFI HTTP boot firmware is told its URL on
metalforge, and iPXE is told the URL of ``boot.ipxe``. A
dnsmasq that dies is started again. Root only (CI is root; elsewhere these
skip, saying why).
"""

from __future__ import annotations

import filecmp
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.config import Settings, load_settings
from metalforge.pxe_filter.dhcp import DhcpError
from metalforge.pxe_filter.dhcp import DhcpServer as ManagedDnsmasq
from metalforge.pxe_filter.setup import FilterHost, build_filter_host
from tests.support.api import LATEST, create_node, provision, wait_for_state, wait_until
from tests.support.dhcp_network import DhcpNetwork, DhcpServer, require_namespaces
from tests.support.images import kernel_bytes, ramdisk_bytes
from tests.support.stack import FAST_CONDUCTOR, Stack, start_stack

pytestmark = pytest.mark.timeout(180)

CLEANED = "52:54:00:ab:00:01"
IDLE = "52:54:00:ab:00:02"
UNKNOWN = "52:54:00:ab:00:03"
TFTP_ROOT = Path("/usr/lib/ipxe")
HTTP_URL = "http://10.250.0.1:6385"
AS_IPXE = "0xaf:01"  # iPXE sends option 175 (its features)
AS_UEFI = "0x5d:0007"  # client architecture 7: x86-64 UEFI
AS_UEFI_HTTP = "0x5d:0010"  # client architecture 16: x86-64 UEFI HTTP boot


@pytest.fixture
def network(tmp_path: Path) -> Iterator[DhcpNetwork]:
    require_namespaces()
    if not (TFTP_ROOT / "undionly.kpxe").exists():
        pytest.fail("Debian's ipxe package is missing (make system-packages)")
    built = DhcpNetwork(tmp_path)
    try:
        yield built
    finally:
        built.close()


def _settings(tmp_path: Path, server: DhcpServer, **dhcp: Any) -> Settings:
    images = tmp_path / "images"
    images.mkdir(exist_ok=True)
    return load_settings(
        state_dir=str(tmp_path / "state"),
        database={"url": f"sqlite:///{tmp_path}/metalforge.sqlite"},
        conductor={
            **FAST_CONDUCTOR,
            "hostname": "test-conductor",
            "netboot": {"http_url": HTTP_URL, "image_dirs": [str(images)]},
        },
        pxe_filter={"driver": "dnsmasq", "dnsmasq_hostsdir": str(server.hostsdir)},
        dhcp={
            "enabled": True,
            "interface": "eth0",
            "range_start": "10.250.0.100",
            "range_end": "10.250.0.119",
            "dnsmasq_command": ["ip", "netns", "exec", server.namespace, "dnsmasq"],
            "run_as": "root",  # the test's directories are root's alone
            **dhcp,
        },
    )


def _started(settings: Settings) -> tuple[Stack, FilterHost]:
    stack = start_stack(settings)
    filter_host = build_filter_host(settings, stack.db)
    assert filter_host is not None
    assert filter_host.dhcp is not None
    filter_host.start()
    return stack, filter_host


def _node_being_cleaned(stack: Stack, images: Path, mac: str) -> str:
    """A node with ``ipxe`` boot in ``clean wait``: its ramdisk boot is prepared."""
    (images / "vmlinuz").write_bytes(kernel_bytes())
    (images / "initrd").write_bytes(ramdisk_bytes())
    node = create_node(
        stack.client,
        boot_interface="ipxe",
        deploy_interface="direct",
        driver_info={
            "deploy_kernel": str(images / "vmlinuz"),
            "deploy_ramdisk": str(images / "initrd"),
        },
    )
    _port(stack, node["uuid"], mac)
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    assert provision(stack.client, node["uuid"], "provide").status_code == 202
    assert wait_for_state(stack.client, node["uuid"], "clean wait")["last_error"] is None
    return str(node["uuid"])


def _port(stack: Stack, node_uuid: str, mac: str) -> None:
    created = stack.client.post(
        "/v1/ports", json={"node_uuid": node_uuid, "address": mac}, headers=LATEST
    )
    assert created.status_code == 201, created.text


def _allowed(server: DhcpServer, mac: str) -> bool:
    try:
        return (server.hostsdir / mac).read_text() == f"{mac}\n"
    except FileNotFoundError:
        return False


def test_only_a_node_being_provisioned_is_answered_and_told_to_chainload_ipxe(
    network: DhcpNetwork, tmp_path: Path
) -> None:
    server = network.add_server(1)
    for number, mac in enumerate((CLEANED, IDLE, UNKNOWN), start=1):
        network.add_client(number, mac)
    stack, filter_host = _started(_settings(tmp_path, server))
    try:
        idle = create_node(stack.client)
        _port(stack, idle["uuid"], IDLE)
        node_uuid = _node_being_cleaned(stack, tmp_path / "images", CLEANED)
        wait_until("the node being cleaned to be let through", lambda: _allowed(server, CLEANED))

        bios = network.offer(CLEANED, attempts=3)
        assert bios is not None
        assert bios["serverid"] == server.address
        assert bios["boot_file"] == "undionly.kpxe"
        assert bios["siaddr"] == server.address  # where firmware fetches it
        uefi = network.offer(CLEANED, options=(AS_UEFI,))
        assert uefi is not None
        assert uefi["boot_file"] == "snponly.efi"
        http = network.offer(CLEANED, options=(AS_UEFI_HTTP,), vendor_class="HTTPClient")
        assert http is not None
        assert http["boot_file"] == f"{HTTP_URL}/boot/firmware/snponly.efi"
        ipxe = network.offer(CLEANED, options=(AS_IPXE,))
        assert ipxe is not None
        assert ipxe["boot_file"] == f"{HTTP_URL}/boot.ipxe"
        assert network.offer(IDLE) is None
        assert network.offer(UNKNOWN) is None

        # Firmware fetches the binary it was told of over TFTP, from the server it was told.
        network.run_in(CLEANED, "ip", "addr", "add", f"{bios['ip']}/24", "dev", "eth0")
        fetched = tmp_path / "fetched.kpxe"
        done = network.run_in(
            CLEANED, "curl", "-sS", "-o", str(fetched), f"tftp://{server.address}/undionly.kpxe"
        )
        assert done.returncode == 0, done.stderr
        assert filecmp.cmp(fetched, TFTP_ROOT / "undionly.kpxe", shallow=False)

        assert provision(stack.client, node_uuid, "abort").status_code == 202
        wait_for_state(stack.client, node_uuid, "clean failed")
        wait_until("the node to be refused again", lambda: not _allowed(server, CLEANED))
        assert network.offer(CLEANED) is None
    finally:
        filter_host.stop()
        stack.stop()
    assert filter_host.dhcp is not None
    assert filter_host.dhcp.pid is None


def test_a_dnsmasq_that_dies_is_started_again_and_answers(
    network: DhcpNetwork, tmp_path: Path
) -> None:
    server = network.add_server(1)
    network.add_client(1, CLEANED)
    stack, filter_host = _started(_settings(tmp_path, server))
    dhcp = filter_host.dhcp
    assert dhcp is not None
    try:
        _node_being_cleaned(stack, tmp_path / "images", CLEANED)
        wait_until("the node to be let through", lambda: _allowed(server, CLEANED))
        first = dhcp.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        wait_until("dnsmasq to be started again", lambda: dhcp.restarts == 1 and dhcp.pid)
        assert dhcp.pid != first
        offered = network.offer(CLEANED, attempts=3)
        assert offered is not None
        assert offered["serverid"] == server.address
    finally:
        filter_host.stop()
        stack.stop()


def test_a_dnsmasq_that_cannot_start_stops_the_start_with_its_reason(
    network: DhcpNetwork, tmp_path: Path
) -> None:
    server = network.add_server(1)
    settings = _settings(tmp_path, server)
    (tmp_path / "state" / "dhcp" / "leases").mkdir(parents=True)  # where its lease file goes
    stack = start_stack(settings)
    try:
        filter_host = build_filter_host(settings, stack.db)
        assert filter_host is not None
        with pytest.raises(
            DhcpError, match=r"did not start on eth0: .*lease file .*leases: Is a directory"
        ):
            filter_host.start()
        assert filter_host.dhcp is not None
        assert filter_host.dhcp.pid is None
    finally:
        stack.stop()


def test_a_configuration_dnsmasq_refuses_is_reported_before_it_runs(tmp_path: Path) -> None:
    if shutil.which("dnsmasq") is None:
        pytest.skip("dnsmasq is not installed (make system-packages)")
    settings = load_settings(
        state_dir=str(tmp_path),
        api={"agent_host": "10.250.0.1"},
        pxe_filter={"driver": "dnsmasq", "dnsmasq_hostsdir": str(tmp_path / "hostsdir")},
        dhcp={
            "enabled": True,
            "range_start": "10.250.0.100",
            "range_end": "10.250.0.119",
            "dnsmasq_command": ["dnsmasq", "--dhcp-boot=tag:"],  # a malformed option
        },
    )
    with pytest.raises(DhcpError, match=r"dnsmasq refused .*dnsmasq\.conf: dnsmasq: "):
        ManagedDnsmasq(settings).start()
