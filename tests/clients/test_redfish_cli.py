"""The real ``baremetal`` CLI driving a redfish node whose BMC is sushy-emulator.

What the CLI asks for must be visible on the BMC: every change is checked
with a raw GET on the emulator, not through metalforge.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.conftest import BaremetalCli
from tests.support.redfish import Bmc, start_bmc, start_redfish_stack
from tests.support.stack import LiveServer
from tests.support.stack import test_settings as settings_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def live_server(sqlite_url: str) -> Iterator[LiveServer]:
    """The all-in-one service with the ``redfish`` hardware type (used by ``cli``)."""
    running = start_redfish_stack(settings_for(sqlite_url))
    server = LiveServer(running)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        running.stop()


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[Bmc]:
    yield from start_bmc(tmp_path / "bmc", count=1)


def test_power_and_boot_device_reach_the_bmc(cli: BaremetalCli, bmc: Bmc) -> None:
    system = bmc.take()
    info = bmc.driver_info(system, redfish_password="bmc-secret")
    node = cli.json(
        "node", "create", "--driver", "redfish", "--name", "rf-1",
        *(arg for key, value in info.items() for arg in ("--driver-info", f"{key}={value}")),
    )  # fmt: skip
    assert node["driver_info"]["redfish_password"] == "******"
    cli.run("node", "manage", "rf-1", "--wait", "60")

    cli.run("node", "power", "on", "rf-1")
    cli.until_power("rf-1", "power on")
    assert bmc.system(system)["PowerState"] == "On"
    cli.run("node", "power", "off", "rf-1")
    cli.until_power("rf-1", "power off")
    assert bmc.system(system)["PowerState"] == "Off"

    supported = cli.json("node", "boot", "device", "show", "rf-1", "--supported")
    assert supported == {"supported_boot_devices": "pxe, disk, cdrom, uefihttp"}
    cli.run("node", "boot", "device", "set", "rf-1", "pxe")
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert cli.json("node", "boot", "device", "show", "rf-1")["boot_device"] == "pxe"
    cli.run("node", "boot", "device", "set", "rf-1", "disk", "--persistent")
    boot = bmc.system(system)["Boot"]
    assert (boot["BootSourceOverrideTarget"], boot["BootSourceOverrideEnabled"]) == (
        "Hdd",
        "Continuous",
    )
    assert cli.json("node", "boot", "device", "show", "rf-1") == {
        "boot_device": "disk",
        "persistent": True,
    }

    refused = cli.error("node", "boot", "device", "set", "rf-1", "bios")
    assert "Boot device 'bios' is not supported by node" in refused
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Hdd"


def test_a_runbook_updates_firmware_and_a_bios_setting_on_the_bmc(
    cli: BaremetalCli, bmc: Bmc
) -> None:
    """The CLI's runbook, firmware and BIOS commands, against the emulator's UpdateService
    and BIOS: what they show is what the BMC holds."""
    system = bmc.take()
    info = bmc.driver_info(system)
    cli.run(
        "node", "create", "--driver", "redfish", "--name", "rf-fw",
        *(arg for key, value in info.items() for arg in ("--driver-info", f"{key}={value}")),
    )  # fmt: skip
    cli.run("node", "manage", "rf-fw", "--wait", "60")
    firmware = {c["component"]: c for c in cli.json("node", "firmware", "list", "rf-fw")}
    assert firmware["bios"]["current_version"] == "1.0.0"

    steps = [
        {
            "interface": "firmware",
            "step": "update",
            "args": {"settings": [{"component": "bios", "url": "https://fw.example.com/b.bin"}]},
            "order": 1,
        },
        {
            "interface": "bios",
            "step": "apply_configuration",
            "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]},
            "order": 2,
        },
    ]
    cli.run(
        "runbook", "create", "--name", "fw-refresh", "--steps", json.dumps(steps),
        "--disable-ramdisk",
    )  # fmt: skip
    cli.run("runbook", "trait", "add", "fw-refresh", "CUSTOM_FW_FLEET")
    cli.run("node", "add", "trait", "rf-fw", "CUSTOM_FW_FLEET")
    cli.run("node", "clean", "rf-fw", "--runbook", "fw-refresh")
    cli.until_state("rf-fw", "manageable")

    assert bmc.system(system)["BiosVersion"] == "1.1.0"
    firmware = {c["component"]: c for c in cli.json("node", "firmware", "list", "rf-fw")}
    assert firmware["bios"]["current_version"] == "1.1.0"
    assert firmware["bios"]["last_version_flashed"] == "1.1.0"
    assert bmc.system(system, "/BIOS")["Attributes"]["ProcTurboMode"] == "Disabled"
    shown = cli.json("node", "bios", "setting", "show", "rf-fw", "ProcTurboMode")
    assert shown["value"] == "Disabled"

    # Servicing: the same BMC work on the node once it carries a workload (adopted:
    # active without a deploy). No step needs the agent, so none boots and the
    # machine keeps running.
    cli.run("node", "power", "on", "rf-fw")
    cli.until_power("rf-fw", "power on")
    cli.run("node", "adopt", "rf-fw")
    cli.until_state("rf-fw", "active")
    enable = {"name": "ProcTurboMode", "value": "Enabled"}
    service_steps = [steps[0], {**steps[1], "args": {"settings": [enable]}}]
    cli.run("runbook", "create", "--name", "fw-service", "--steps", json.dumps(service_steps))
    cli.run("runbook", "trait", "add", "fw-service", "CUSTOM_FW_FLEET")
    cli.run("node", "service", "rf-fw", "--runbook", "fw-service")
    cli.until_state("rf-fw", "active")
    node = cli.json("node", "show", "rf-fw", "--fields", "provision_state", "last_error")
    assert node == {"provision_state": "active", "last_error": None}
    assert bmc.system(system)["BiosVersion"] == "1.2.0"
    firmware = {c["component"]: c for c in cli.json("node", "firmware", "list", "rf-fw")}
    assert firmware["bios"]["current_version"] == "1.2.0"
    assert bmc.system(system, "/BIOS")["Attributes"]["ProcTurboMode"] == "Enabled"
    shown = cli.json("node", "bios", "setting", "show", "rf-fw", "ProcTurboMode")
    assert shown["value"] == "Enabled"
    assert bmc.system(system)["PowerState"] == "On", "servicing without the agent powers nothing"
