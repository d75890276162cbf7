"""Virtual machines as the hardware: the helpers of the tests that boot QEMU machines.

A lab all-in-one (the API on the agents' endpoint on a bridge, a conductor,
the dnsmasq PXE filter and metalforge's DHCP service), the tiny ramdisk's
report read off a machine's serial console, and dnsmasq's log as metalforge
logs it. Root only; CI must run them (they fail there, rather than skip,
when something is missing).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.config import Settings, load_settings
from metalforge.pxe_filter.setup import build_filter_host
from metalforge_lab import namespaces, tiny_ramdisk, vm
from metalforge_lab.ports import free_port
from tests.support.api import LATEST, create_node, provision, wait_for_state
from tests.support.stack import FAST_CONDUCTOR, LiveServer, Stack, start_stack

IN_CI = bool(os.environ.get("CI"))
MAC = "52:54:00:4d:46:01"
STRANGER = "52:54:00:4d:46:02"
BOOT_TIMEOUT = 300.0
"""Seconds from power-on to the ramdisk's lookup under software emulation, on a busy machine."""


def missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI must boot the VM: {reason}")
    pytest.skip(reason)


def require() -> None:
    reason = vm.available()
    if os.geteuid() != 0:
        reason = "a VM on a bridge needs root"
    elif shutil.which("dnsmasq") is None:
        reason = "dnsmasq is not installed"
    elif shutil.which("dbclient") is None:
        reason = "dbclient (dropbear-bin) is not installed: it logs in to a rescued machine"
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"CI must boot the VM: {reason}")
    pytest.skip(reason)


class DnsmasqLog(logging.Handler):
    """dnsmasq's lines as metalforge logs them, for the test to wait on."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def saw(self, *words: str) -> bool:
        return any(all(word in line for word in words) for line in list(self.lines))


def lab_settings(
    bridge: namespaces.Bridge,
    ramdisk_dir: Path,
    tmp_path: Path,
    *,
    conductor: dict[str, Any] | None = None,
    kernel_append: str = "",
    dhcp_service: bool = True,
    **dhcp: Any,
) -> Settings:
    """An all-in-one's settings: the dnsmasq PXE filter and metalforge's DHCP service on
    the bridge, as docs/booting.md has an operator set them (``conductor`` adds to the
    conductor's, ``kernel_append`` to the ramdisk's command line); without
    ``dhcp_service``, a network where nothing answers DHCP."""
    network = bridge.network
    if not dhcp_service:
        network_services: dict[str, Any] = {"pxe_filter": {"driver": "noop"}}
    else:
        network_services = {
            "pxe_filter": {"driver": "dnsmasq", "dnsmasq_hostsdir": str(tmp_path / "hostsdir")},
            "dhcp": {
                "enabled": True,
                "interface": bridge.name,
                "range_start": str(network.network_address + 100),
                "range_end": str(network.network_address + 200),
                "run_as": "root",  # the test's directories are root's alone
                **dhcp,
            },
        }
    return load_settings(
        state_dir=str(tmp_path / "state"),
        database={"url": f"sqlite:///{tmp_path}/metalforge.sqlite"},
        api={"port": free_port(), "agent_host": bridge.address, "agent_port": free_port()},
        inspector={"enabled": False},
        conductor={
            **FAST_CONDUCTOR,
            "hostname": "test-conductor",
            # Machines are powered by hand (fake) or by the lab's Redfish BMC.
            "enabled_hardware_types": ["fake-hardware", "redfish"],
            "netboot": {
                "image_cache_dir": str(tmp_path / "boot-images"),
                "image_dirs": [str(ramdisk_dir)],
                "kernel_append": f"console=ttyS0 panic=-1 {kernel_append}".strip(),
            },
            **(conductor or {}),
        },
        **network_services,
    )


@contextlib.contextmanager
def all_in_one(settings: Settings) -> Iterator[Stack]:
    """The API on the agents' endpoint, a conductor, the PXE filter and the DHCP service
    (when the settings have them)."""
    running = start_stack(settings)
    server = LiveServer(running)
    filter_host = build_filter_host(settings, running.db)
    try:
        server.start()
        if filter_host is not None:
            filter_host.start()
        yield running
    finally:
        if filter_host is not None:
            filter_host.stop()
        server.stop()
        running.stop()


def node_being_cleaned(
    client: Any, ramdisk: tiny_ramdisk.TinyRamdisk, mac: str = MAC, **fields: Any
) -> str:
    """A node whose ramdisk boot is prepared: in ``clean wait`` (``ipxe`` boot unless
    ``fields`` say otherwise)."""
    driver_info = {
        "deploy_kernel": str(ramdisk.kernel),
        "deploy_ramdisk": str(ramdisk.initramfs),
        **fields.pop("driver_info", {}),
    }
    node = create_node(
        client,
        **{"boot_interface": "ipxe", "deploy_interface": "direct", **fields},
        driver_info=driver_info,
    )
    port = client.post(
        "/v1/ports", json={"address": mac, "node_uuid": node["uuid"]}, headers=LATEST
    )
    assert port.status_code == 201, port.text
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    assert provision(client, node["uuid"], "provide").status_code == 202
    assert wait_for_state(client, node["uuid"], "clean wait")["last_error"] is None
    return str(node["uuid"])


def boot_to_lookup(
    mac: str,
    bridge: namespaces.Bridge,
    tmp_path: Path,
    *,
    uefi: bool = False,
    nic_rom: bool = True,
    http_boot: bool = False,
) -> dict[str, str]:
    """Power a VM on and wait for its ramdisk's report; its MARK lines by name."""
    tap = f"mfvt{os.getpid() % 100000}"
    machine = vm.NetbootVm(
        tap,
        mac,
        bridge.name,
        tmp_path / "console.log",
        uefi=uefi,
        nic_rom=nic_rom,
        http_boot=http_boot,
    )
    machine.power_on()
    try:
        console = machine.wait_for_console(f"{tiny_ramdisk.MARK} done", BOOT_TIMEOUT)
    finally:
        machine.power_off()
    return ramdisk_report(console)


def ramdisk_report(console: str) -> dict[str, str]:
    """The tiny ramdisk's ``MARK`` lines on a console, by name (and the console's tail)."""
    lines = {
        line.split(" ", 2)[1]: line.split(" ", 2)[2]
        for line in console.splitlines()
        if line.startswith(tiny_ramdisk.MARK + " ") and len(line.split(" ", 2)) == 3
    }
    lines["console"] = console[-2000:]
    return lines


def check_lookup(
    lines: dict[str, str], node_uuid: str, agents_url: str, *, bootif: str | None = MAC
) -> None:
    """The ramdisk was told where metalforge is, looked itself up and got its token."""
    assert f"ipa-api-url={agents_url}" in lines["cmdline"], lines["console"]
    if bootif is not None:
        assert f"BOOTIF={bootif}" in lines["cmdline"]
    assert "console=ttyS0" in lines["cmdline"]
    status, _, body = lines["lookup"].partition(" ")
    assert status == "ok", lines["console"]
    found = json.loads(body)
    assert found["node"]["uuid"] == node_uuid
    assert found["config"]["agent_token"]  # the first lookup of this boot receives it


@contextlib.contextmanager
def watching_dnsmasq() -> Iterator[DnsmasqLog]:
    """Collect metalforge's dnsmasq's log lines while the block runs."""
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
