"""The redfish interfaces against the real sushy-emulator, checked with raw HTTP on the emulator.

Each test gets its own fake system of a module-wide emulator; BMC failures
(closed port, refused credentials, unknown system) use real peers too.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from metalforge.config import BmcGuardSettings, ConductorSettings, load_settings
from metalforge.db.bios_settings import Setting
from metalforge.db.models import Node
from metalforge.drivers.base import (
    POWER_OFF,
    POWER_ON,
    REBOOT,
    SOFT_POWER_OFF,
    SOFT_REBOOT,
    BmcUnavailable,
    Collected,
    DriverError,
    ReadOnlyTask,
    StepFailed,
)
from metalforge.drivers.bmc_guard import GUARD, BreakerOpen
from metalforge.drivers.redfish import (
    RedfishBios,
    RedfishHttpsBoot,
    RedfishInspect,
    RedfishManagement,
    RedfishPower,
    RedfishVirtualMediaBoot,
)
from metalforge.drivers.redfish import management as redfish_management
from metalforge.drivers.redfish.connection import CONNECTIONS, parse_driver_info
from metalforge.netboot.iso import IsoTools
from metalforge_lab.ports import free_port
from metalforge_lab.redfish_emulator import FakeSystem
from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    get_node,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.images import kernel_bytes, ramdisk_bytes
from tests.support.redfish import (
    PASSWORD,
    USER,
    Bmc,
    fake_system,
    serve_directory,
    start_bmc,
    start_redfish_stack,
)
from tests.support.stack import FAST_CONDUCTOR, Stack
from tests.support.stalling import stalling

pytestmark = pytest.mark.timeout(120)

POWER = RedfishPower()
MANAGEMENT = RedfishManagement()
BOOT = RedfishVirtualMediaBoot()
HTTPS_BOOT = RedfishHttpsBoot()
INSPECT = RedfishInspect()
BIOS = RedfishBios()

IN_CI = bool(os.environ.get("CI"))
BMC_SYSTEMS = 46
"""Fake systems of the shared emulator: one for each test that takes one, and spares."""


class Task(ReadOnlyTask):
    """A ``DriverTask`` with a real sleep and a node that is never saved.

    Its clock moves only with its sleeps (``slept``), so how long a driver waited
    is what the driver asked for, whatever the load on the machine.
    """

    def __init__(self, info: dict[str, Any], settings: ConductorSettings | None = None) -> None:
        super().__init__(
            Node(
                uuid="00000000-0000-4000-8000-000000000001",
                driver="redfish",
                driver_info=info,
                driver_internal_info={},
                properties={},
                boot_mode=None,
            ),
            settings,
        )
        self.records: list[tuple[str, str, str]] = []
        self.bios: dict[str, Setting] | None = None
        self.slept = 0.0

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        self.slept += seconds

    def now(self) -> float:
        return 1_000_000.0 + self.slept

    def record(self, event_type: str, event: str, severity: str = "INFO") -> None:
        self.records.append((event_type, event, severity))

    def store_bios_settings(self, settings: Sequence[Setting]) -> None:
        self.bios = {s.name: s for s in settings}


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    """An emulator without auth and with instant power changes, shared by the module."""
    yield from start_bmc(tmp_path_factory.mktemp("bmc"), count=BMC_SYSTEMS)


@pytest.fixture(scope="module")
def auth_bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    """An emulator that wants Basic auth (``USER``/``PASSWORD``)."""
    yield from start_bmc(tmp_path_factory.mktemp("auth-bmc"), count=6, users={USER: PASSWORD})


@pytest.fixture
def system(bmc: Bmc) -> FakeSystem:
    return bmc.take()


@pytest.fixture
def task(bmc: Bmc, system: FakeSystem) -> Task:
    return Task(bmc.driver_info(system))


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An HTTP server with a small ``deploy.iso`` (the emulator downloads what it inserts)."""
    www = tmp_path_factory.mktemp("www")
    (www / "deploy.iso").write_bytes(b"\0" * 4096)
    yield from serve_directory(www)


# -- driver_info -------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "message"),
    [
        ({}, "missing driver_info: redfish_address"),
        ({"redfish_address": "ftp://bmc"}, "redfish_address 'ftp://bmc' must be an http(s) URL"),
        ({"redfish_address": "http://bmc:notaport"}, "is not a valid URL"),
        ({"redfish_address": "bmc", "redfish_verify_ca": "maybe"}, "redfish_verify_ca must be"),
        ({"redfish_address": "bmc", "redfish_system_id": 7}, "redfish_system_id must be a string"),
    ],
)
def test_validate_names_the_missing_or_invalid_key(info: dict[str, Any], message: str) -> None:
    for iface in (POWER, MANAGEMENT, INSPECT, BIOS):
        with pytest.raises(DriverError, match="Invalid redfish driver_info") as caught:
            iface.validate(Task(info))
        assert message in str(caught.value)


def test_driver_info_defaults_and_string_values() -> None:
    parsed = parse_driver_info(
        {"redfish_address": "bmc.example.com:8443/", "redfish_system_id": "1"}
    )
    assert parsed.address == "https://bmc.example.com:8443"
    assert parsed.system_id == "/redfish/v1/Systems/1"
    assert parsed.verify is True
    for text, expected in (("false", False), ("No", False), ("1", True)):
        info = {"redfish_address": "http://b", "redfish_verify_ca": text}
        assert parse_driver_info(info).verify is expected
    assert parse_driver_info({"redfish_address": "b", "redfish_verify_ca": "/"}).verify == "/"


def test_properties_describe_the_keys() -> None:
    for iface in (POWER, MANAGEMENT, INSPECT, BIOS):
        assert set(iface.properties()) == {
            "redfish_address",
            "redfish_system_id",
            "redfish_username",
            "redfish_password",
            "redfish_verify_ca",
        }
    assert {
        "deploy_iso",
        "redfish_deploy_iso",
        "deploy_kernel",
        "deploy_ramdisk",
        "external_http_url",
        "force_persistent_boot_device",
    } <= set(BOOT.properties())
    with pytest.raises(DriverError, match="driver_info is missing deploy_kernel, deploy_ramdisk"):
        BOOT.validate(Task({"redfish_address": "http://b"}))
    for key in ("deploy_iso", "redfish_deploy_iso"):
        with pytest.raises(DriverError, match=f"{key} must be an http"):
            BOOT.validate(Task({"redfish_address": "http://b", key: "images/x.iso"}))
    # Metal3 names an ISO and removes the kernel and ramdisk: nothing else is needed.
    BOOT.validate(Task({"redfish_address": "http://b", "deploy_iso": "http://i/x.iso"}))


# -- power ---------------------------------------------------------------------


def test_power_transitions_are_what_the_bmc_shows(bmc: Bmc, system: FakeSystem, task: Task) -> None:
    assert POWER.get_power_state(task) == POWER_OFF
    for target, expected in (
        (POWER_ON, "On"),
        (POWER_ON, "On"),  # already there: nothing is sent
        (SOFT_REBOOT, "On"),
        (REBOOT, "On"),
        (SOFT_POWER_OFF, "Off"),
        (REBOOT, "On"),  # from off, a reboot powers on
        (POWER_OFF, "Off"),
    ):
        POWER.set_power_state(task, target)
        assert bmc.system(system)["PowerState"] == expected, target
        assert POWER.get_power_state(task) == (POWER_ON if expected == "On" else POWER_OFF)


def test_power_change_waits_for_a_slow_bmc_and_times_out_clearly(tmp_path: Path) -> None:
    # The emulator applies the change 2-3 s after the request (int(now) + 3).
    for slow in start_bmc(tmp_path, count=2, power_delay=(3, 3)):
        waited, timed_out = slow.take(), slow.take()
        task = Task(slow.driver_info(waited))
        POWER.set_power_state(task, POWER_ON)
        assert task.slept > 0, "the driver returned before the BMC had changed"
        assert slow.system(waited)["PowerState"] == "On"

        task = Task(slow.driver_info(timed_out))
        with pytest.raises(DriverError) as caught:
            POWER.set_power_state(task, POWER_ON, timeout=1)
        assert task.slept == pytest.approx(1.0), "it waits its timeout, no more"
        message = str(caught.value)
        assert "Timed out after 1 s waiting for the node to reach 'power on'" in message
        assert "the BMC still reports 'Off'" in message


# -- management ----------------------------------------------------------------


def test_boot_device_once_and_persistent(bmc: Bmc, system: FakeSystem, task: Task) -> None:
    assert MANAGEMENT.supported_boot_devices(task) == ["pxe", "disk", "cdrom", "uefihttp"]
    MANAGEMENT.set_boot_device(task, "pxe")
    boot = bmc.system(system)["Boot"]
    assert boot["BootSourceOverrideTarget"] == "Pxe"
    # The emulator accepts Once but always reads back Continuous.
    assert MANAGEMENT.get_boot_device(task) == {"boot_device": "pxe", "persistent": True}
    MANAGEMENT.set_boot_device(task, "cdrom", persistent=True)
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Cd"
    assert MANAGEMENT.get_boot_device(task)["boot_device"] == "cdrom"


def test_unsupported_boot_device_is_refused_before_anything_is_sent(
    bmc: Bmc, system: FakeSystem, task: Task
) -> None:
    with pytest.raises(DriverError, match="Boot device 'bios' is not supported") as caught:
        MANAGEMENT.set_boot_device(task, "bios")
    assert "supported: pxe, disk, cdrom" in str(caught.value)
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Hdd"


def test_boot_mode(bmc: Bmc, system: FakeSystem, task: Task) -> None:
    assert MANAGEMENT.get_boot_mode(task) == "uefi"
    MANAGEMENT.set_boot_mode(task, "bios")
    assert bmc.system(system)["Boot"]["BootSourceOverrideMode"] == "Legacy"
    assert MANAGEMENT.get_boot_mode(task) == "bios"
    assert task.node.boot_mode == "bios"
    with pytest.raises(DriverError, match="Invalid boot mode 'efi'"):
        MANAGEMENT.set_boot_mode(task, "efi")


def test_secure_boot_needs_uefi(bmc: Bmc, system: FakeSystem, task: Task) -> None:
    assert MANAGEMENT.get_secure_boot_state(task) is False
    MANAGEMENT.set_secure_boot_state(task, True)
    assert bmc.system(system, "/SecureBoot")["SecureBootEnable"] is True
    assert MANAGEMENT.get_secure_boot_state(task) is True
    MANAGEMENT.set_secure_boot_state(task, False)
    MANAGEMENT.set_boot_mode(task, "bios")
    with pytest.raises(DriverError, match="Configuring secure boot requires UEFI"):
        MANAGEMENT.set_secure_boot_state(task, True)
    assert bmc.system(system, "/SecureBoot")["SecureBootEnable"] is False


def test_indicators_are_the_system_and_chassis_leds(
    bmc: Bmc, system: FakeSystem, task: Task
) -> None:
    found = MANAGEMENT.get_supported_indicators(task)
    assert set(found["system"]) == {system.uuid}
    assert found["system"][system.uuid].states == ("blinking", "off", "on")
    MANAGEMENT.set_indicator_state(task, "system", system.uuid, "blinking")
    assert bmc.system(system)["IndicatorLED"] == "Blinking"
    assert MANAGEMENT.get_indicator_state(task, "system", system.uuid) == "blinking"
    for chassis in found.get("chassis", {}):
        MANAGEMENT.set_indicator_state(task, "chassis", chassis, "off")
        assert MANAGEMENT.get_indicator_state(task, "chassis", chassis) == "off"
    with pytest.raises(DriverError, match="Unknown indicator nope for component system"):
        MANAGEMENT.get_indicator_state(task, "system", "nope")


def test_inject_nmi_is_a_reset_with_nmi(bmc: Bmc, system: FakeSystem, task: Task) -> None:
    # The lab's systems take an NMI only while powered on: the refusal shows it arrived.
    with pytest.raises(DriverError, match="HTTP 400 while trying to inject an NMI"):
        MANAGEMENT.inject_nmi(task)
    POWER.set_power_state(task, POWER_ON)
    MANAGEMENT.inject_nmi(task)


# -- virtual media boot --------------------------------------------------------


@pytest.mark.parametrize("key", ["deploy_iso", "redfish_deploy_iso"])
def test_virtual_media_ramdisk_then_instance(
    bmc: Bmc, system: FakeSystem, task: Task, images: str, key: str
) -> None:
    iso = f"{images}/deploy.iso"
    task.node.driver_info = {**task.node.driver_info, key: iso}
    BOOT.validate(task)
    for _ in range(2):  # the second insert ejects the first
        BOOT.prepare_ramdisk(task)
        cd = bmc.system(system, "/VirtualMedia/Cd")
        assert (cd["Inserted"], cd["Image"]) == (True, iso)
        assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Cd"
        assert task.node.driver_internal_info["redfish_virtual_media"] == iso

    BOOT.prepare_instance(task)
    assert bmc.system(system, "/VirtualMedia/Cd")["Inserted"] is False
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Hdd"
    assert "redfish_virtual_media" not in task.node.driver_internal_info
    BOOT.clean_up_instance(task)  # nothing inserted: nothing to do


@pytest.mark.parametrize(
    ("forced", "persistent"),
    [
        ("Always", [True, True]),
        ("Never", [False, False]),
        ("Default", [False, True]),
        (None, [False, True]),
        ("True", [True, True]),  # Ironic's older boolean: Always
        ("sometimes", [False, True]),  # anything else: the flow's own choice
    ],
)
def test_force_persistent_boot_device_decides_what_the_flows_set(
    bmc: Bmc,
    system: FakeSystem,
    task: Task,
    images: str,
    monkeypatch: pytest.MonkeyPatch,
    forced: str | None,
    persistent: list[bool],
) -> None:
    """The ramdisk's CD, then the instance's disk, one-time or persistent as the node says
    (the emulator shows every override as Continuous: what was asked of it is checked)."""
    asked: list[bool] = []
    real = redfish_management.set_boot_device

    def recorded(system: Any, device: str, persistent: bool) -> None:
        asked.append(persistent)
        real(system, device, persistent)

    monkeypatch.setattr(redfish_management, "set_boot_device", recorded)
    task.node.driver_info = {
        **task.node.driver_info,
        "deploy_iso": f"{images}/deploy.iso",
        "force_persistent_boot_device": forced,
    }
    BOOT.prepare_ramdisk(task)
    BOOT.prepare_instance(task)
    assert asked == persistent
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Hdd"


def test_https_boot_tells_the_bmc_the_isos_url_for_uefi_http_boot(
    bmc: Bmc, system: FakeSystem, task: Task, images: str
) -> None:
    """``redfish-https``: nothing inserted; the BMC's ``HttpBootUri`` is the ISO."""
    iso = f"{images}/deploy.iso"
    task.node.driver_info = {**task.node.driver_info, "deploy_iso": iso}
    MANAGEMENT.set_boot_mode(task, "bios")
    with pytest.raises(DriverError, match="offers no UEFI HTTP boot"):
        HTTPS_BOOT.prepare_ramdisk(task)
    MANAGEMENT.set_boot_mode(task, "uefi")
    HTTPS_BOOT.prepare_ramdisk(task)
    boot = bmc.system(system)["Boot"]
    assert boot["HttpBootUri"] == iso
    assert task.node.driver_internal_info["redfish_virtual_media"] == iso
    HTTPS_BOOT.prepare_instance(task)
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Hdd"
    assert "redfish_virtual_media" not in task.node.driver_internal_info
    # A ramdisk instance: its own ISO, through the same boot.
    task.node.instance_info = {"boot_iso": f"{images}/deploy.iso?live"}
    HTTPS_BOOT.prepare_ramdisk_instance(task)
    assert bmc.system(system)["Boot"]["HttpBootUri"] == f"{images}/deploy.iso?live"


def test_virtual_media_attached_by_hand(
    bmc: Bmc, system: FakeSystem, task: Task, images: str
) -> None:
    iso = f"{images}/deploy.iso"
    drives = {tuple(d.media_types): d for d in MANAGEMENT.get_virtual_media(task)}
    assert not any(d.inserted for d in drives.values())
    MANAGEMENT.attach_virtual_media(task, "cdrom", iso)
    cd = bmc.system(system, "/VirtualMedia/Cd")
    assert (cd["Inserted"], cd["Image"]) == (True, iso)
    held = [d for d in MANAGEMENT.get_virtual_media(task) if d.inserted]
    assert [(d.image, "CD" in d.media_types) for d in held] == [(iso, True)]
    # The emulator's drives: a CD/DVD and a floppy that also takes USB sticks (``disk``).
    assert sorted(drives) == [("CD", "DVD"), ("Floppy", "USBStick")]
    MANAGEMENT.attach_virtual_media(task, "disk", iso)
    assert bmc.system(system, "/VirtualMedia/Floppy")["Inserted"] is True
    MANAGEMENT.detach_virtual_media(task, ["cdrom"])
    assert bmc.system(system, "/VirtualMedia/Cd")["Inserted"] is False
    assert bmc.system(system, "/VirtualMedia/Floppy")["Inserted"] is True
    MANAGEMENT.detach_virtual_media(task, [])
    assert bmc.system(system, "/VirtualMedia/Floppy")["Inserted"] is False


def test_virtual_media_the_bmc_cannot_download(
    bmc: Bmc, system: FakeSystem, task: Task, images: str
) -> None:
    task.node.driver_info = {
        **task.node.driver_info,
        "redfish_deploy_iso": f"{images}/missing.iso",
    }
    with pytest.raises(DriverError) as caught:
        BOOT.prepare_ramdisk(task)
    message = str(caught.value)
    assert f"Redfish BMC at {bmc.address} answered HTTP 400" in message
    assert "insert virtual media" in message
    assert bmc.system(system, "/VirtualMedia/Cd")["Inserted"] is False


@contextlib.contextmanager
def _building_boot(bmc: Bmc, system: FakeSystem, tmp_path: Path) -> Iterator[tuple[Task, str]]:
    """A node whose ISO metalforge builds, served as the agents' endpoint serves it (the URL
    the BMC is told): the task and that URL."""
    if missing := IsoTools().missing():
        if IN_CI:
            pytest.fail(f"CI must build boot ISOs: missing {', '.join(missing)}")
        pytest.skip(f"missing Debian packages: {', '.join(missing)}")
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    (deploy / "vmlinuz").write_bytes(kernel_bytes())
    (deploy / "initrd").write_bytes(ramdisk_bytes())
    www, cache = tmp_path / "www", tmp_path / "cache"
    (www / "boot").mkdir(parents=True)
    (cache / "blobs").mkdir(parents=True)
    (www / "boot" / "images").symlink_to(cache / "blobs", target_is_directory=True)
    for url in serve_directory(www):
        netboot = {"http_url": url, "image_cache_dir": str(cache), "image_dirs": [str(deploy)]}
        settings = load_settings(conductor={"netboot": netboot}).conductor
        info = {
            **bmc.driver_info(system),
            "deploy_kernel": str(deploy / "vmlinuz"),
            "deploy_ramdisk": str(deploy / "initrd"),
        }
        yield Task(info, settings), url


def _served(tmp_path: Path, image: str) -> bytes:
    return (tmp_path / "cache" / "blobs" / image.rsplit("/", 1)[1]).read_bytes()


def test_virtual_media_inserts_the_iso_metalforge_builds_from_kernel_and_ramdisk(
    bmc: Bmc, system: FakeSystem, tmp_path: Path
) -> None:
    """No ``redfish_deploy_iso``: the ISO is built once, served by its digest, inserted."""
    with _building_boot(bmc, system, tmp_path) as (task, url):
        BOOT.validate(task)
        BOOT.prepare_ramdisk(task)
        cd = bmc.system(system, "/VirtualMedia/Cd")
        assert cd["Inserted"] is True
        image = cd["Image"]
        assert image.startswith(f"{url}/boot/images/")
        assert task.node.driver_internal_info["redfish_virtual_media"] == image
        iso = _served(tmp_path, image)
        assert hashlib.sha256(iso).hexdigest() == image.rsplit("/", 1)[1]
        # isolinux's configuration is stored as it is: the agent is told where metalforge is.
        assert f"APPEND initrd=/initrd ipa-api-url={url} ".encode() in iso
        built = sorted((tmp_path / "cache" / "blobs").iterdir())

        BOOT.prepare_ramdisk(task)  # the same boot again: nothing is built again
        assert bmc.system(system, "/VirtualMedia/Cd")["Image"] == image
        assert sorted((tmp_path / "cache" / "blobs").iterdir()) == built

        # A node whose BMC reaches this service at another address says so.
        elsewhere = url.replace("127.0.0.1", "localhost")
        task.node.driver_info = {**task.node.driver_info, "external_http_url": f"{elsewhere}/"}
        BOOT.prepare_ramdisk(task)
        assert bmc.system(system, "/VirtualMedia/Cd")["Image"] == image.replace(url, elsewhere)


def test_network_data_goes_on_the_iso_which_is_ejected_when_the_ramdisk_stops(
    bmc: Bmc, system: FakeSystem, tmp_path: Path
) -> None:
    with _building_boot(bmc, system, tmp_path) as (task, _url):
        BOOT.prepare_ramdisk(task)
        plain = bmc.system(system, "/VirtualMedia/Cd")["Image"]
        # A node with network_data (no DHCP on its network) gets an ISO that carries it.
        task.node.network_data = {
            "links": [{"id": "nic0", "type": "phy", "ethernet_mac_address": "52:54:00:aa:bb:cc"}],
            "networks": [],
            "services": [],
        }
        BOOT.prepare_ramdisk(task)
        static = bmc.system(system, "/VirtualMedia/Cd")["Image"]
        assert static != plain
        carried = _served(tmp_path, static)
        assert b'"ethernet_mac_address": "52:54:00:aa:bb:cc"' in carried
        assert b"config-2" in carried
        assert b"config-2" not in _served(tmp_path, plain)

        # The ramdisk's flow ends (inspection, cleaning): the ISO is ejected.
        BOOT.clean_up_ramdisk(task)
        assert bmc.system(system, "/VirtualMedia/Cd")["Inserted"] is False
        assert "redfish_virtual_media" not in task.node.driver_internal_info
        BOOT.clean_up_ramdisk(task)  # nothing inserted: nothing to do


# -- inspection ----------------------------------------------------------------


def test_inspection_reads_the_bmc_into_an_agent_inventory(bmc: Bmc) -> None:
    with_disk = next(s for s in (bmc.take(), bmc.take()) if s.disks_gib)
    task = Task(bmc.driver_info(with_disk))
    task.node.properties = {"local_gb": 1}
    collected = INSPECT.inspect_hardware(task)
    assert isinstance(collected, Collected)
    inventory = collected.report["inventory"]
    assert inventory["cpu"] == {"count": 8, "architecture": "x86_64"}
    assert inventory["memory"] == {"physical_mb": 16384}
    assert [d["size"] for d in inventory["disks"]] == [100 * 1024**3]
    # The emulator names each NIC by its MAC.
    assert inventory["interfaces"] == [
        {"name": mac, "mac_address": mac.lower()} for mac in with_disk.macs
    ]
    assert inventory["system_vendor"] == {"manufacturer": "Sushy Emulator"}
    assert inventory["boot"]["current_boot_mode"] in ("uefi", "bios")
    assert task.node.properties == {"local_gb": 1}  # the conductor's processing sets them


def test_inspection_of_a_bmc_that_reports_no_storage_lists_no_disks(bmc: Bmc) -> None:
    without = next(s for s in (bmc.take(), bmc.take()) if not s.disks_gib)
    collected = INSPECT.inspect_hardware(Task(bmc.driver_info(without)))
    assert isinstance(collected, Collected)
    assert "disks" not in collected.report["inventory"]
    assert collected.report["inventory"]["memory"] == {"physical_mb": 16384}


# -- BIOS ----------------------------------------------------------------------


def test_bios_steps_are_declared_for_cleaning_without_ramdisk_and_for_deploy() -> None:
    declared = {(d.kind, d.method): d for d in RedfishBios.steps()}
    assert set(declared) == {
        ("clean", "apply_configuration"),
        ("deploy", "apply_configuration"),
        ("service", "apply_configuration"),
        ("clean", "factory_reset"),
        ("deploy", "factory_reset"),
        ("service", "factory_reset"),
    }
    assert not declared["service", "factory_reset"].requires_ramdisk
    assert all(d.priority == 0 for d in declared.values())
    assert not declared["clean", "apply_configuration"].requires_ramdisk
    assert declared["clean", "apply_configuration"].argsinfo["settings"].required


def test_bios_apply_and_factory_reset(bmc: Bmc, system: FakeSystem, task: Task) -> None:
    settings = [
        {"name": "ProcTurboMode", "value": "Disabled"},
        {"name": "NicBoot1", "value": "Disabled"},
    ]
    assert (
        BIOS.execute_step(
            task, "clean", {"step": "apply_configuration", "args": {"settings": settings}}
        )
        == "done"
    )
    current = bmc.system(system, "/BIOS")["Attributes"]
    assert (current["ProcTurboMode"], current["NicBoot1"]) == ("Disabled", "Disabled")
    assert task.bios is not None
    assert {n: s.value for n, s in task.bios.items()} == {
        n: None if v is None else str(v) for n, v in current.items()
    }
    # The emulator's attribute registry describes the settings it lists.
    turbo = task.bios["ProcTurboMode"]
    assert (turbo.attribute_type, turbo.allowable_values) == (
        "Enumeration",
        ("Enabled", "Disabled"),
    )
    assert turbo.read_only is False
    assert "bios_settings_pending" not in task.node.driver_internal_info

    task.bios = None
    BIOS.factory_reset(task)
    current = bmc.system(system, "/BIOS")["Attributes"]
    assert current["ProcTurboMode"] == "Enabled"
    assert task.bios is not None
    assert task.bios["ProcTurboMode"].value == "Enabled"

    task.bios = None
    BIOS.cache_bios_settings(task)
    assert task.bios is not None
    assert task.bios["ProcTurboMode"].value == "Enabled"


def test_bios_values_the_registry_refuses_never_reach_the_bmc(
    bmc: Bmc, system: FakeSystem, task: Task
) -> None:
    before = bmc.system(system, "/BIOS")["Attributes"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "ProcTurboMode", "value": "Sometimes"}, "must be one of Enabled, Disabled"),
        ({"name": "BootMode", "value": 3}, "must be one of"),
    ]
    for setting, message in cases:
        with pytest.raises(StepFailed, match=message):
            BIOS.apply_configuration(task, [setting])
    assert bmc.system(system, "/BIOS")["Attributes"] == before
    assert task.bios is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ([{"name": "NoSuchKnob", "value": 1}], "BIOS setting(s) NoSuchKnob are not known"),
        ([{"name": "ProcTurboMode"}], "is not a list of {name, value} objects"),
        ({"ProcTurboMode": "Disabled"}, "is not a list of {name, value} objects"),
        ([], "the list is empty"),
    ],
)
def test_bios_invalid_settings_fail_the_step(
    bmc: Bmc, system: FakeSystem, task: Task, settings: Any, message: str
) -> None:
    with pytest.raises(StepFailed) as caught:
        BIOS.apply_configuration(task, settings)
    assert message in str(caught.value)
    assert bmc.system(system, "/BIOS")["Attributes"]["ProcTurboMode"] == "Enabled"


# -- BMC failures ----------------------------------------------------------------


def test_unreachable_bmc_names_the_address_and_the_reason() -> None:
    address = f"http://127.0.0.1:{free_port()}"
    task = Task({"redfish_address": address, "redfish_system_id": "/redfish/v1/Systems/x"})
    with pytest.raises(DriverError) as caught:
        POWER.get_power_state(task)
    assert task.slept == 0, "a refused connection is reported, not waited on"
    assert str(caught.value) == (
        f"Redfish BMC at {address} is unreachable (connection refused) "
        "while trying to read the power state"
    )


def test_a_bmc_that_keeps_refusing_connections_trips_its_breaker_and_is_not_called() -> None:
    port = free_port()
    address = f"http://127.0.0.1:{port}"
    task = Task({"redfish_address": address, "redfish_system_id": "/redfish/v1/Systems/x"})
    failures_to_open = GUARD.settings.failures_to_open
    for _ in range(failures_to_open):
        with pytest.raises(BmcUnavailable, match="unreachable"):
            POWER.get_power_state(task)
    # Something listens there now, and answers: the guard does not even try it.
    with socket.create_server(("127.0.0.1", port)) as listener:
        listener.settimeout(0.2)
        with pytest.raises(BreakerOpen, match=f"failed to answer {failures_to_open} times"):
            POWER.get_power_state(task)
        with pytest.raises(TimeoutError):
            listener.accept()
    # Another node's BMC is unaffected.
    other = Task({"redfish_address": f"http://127.0.0.1:{free_port()}"})
    with pytest.raises(BmcUnavailable, match="unreachable"):
        POWER.get_power_state(other)


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_a_bmc_that_never_finishes_answering_is_cut_off_and_trips_its_breaker(mode: str) -> None:
    """Per-read timeouts alone let such a BMC hold the calling worker for ever: the
    whole-call deadline ends each call, and the calls count as the BMC not answering."""
    GUARD.configure(BmcGuardSettings(call_deadline=0.5, failures_to_open=2, cooldown=600))
    with stalling(mode) as bmc:  # type: ignore[arg-type]
        task = Task({"redfish_address": bmc.url, "redfish_system_id": "/redfish/v1/Systems/x"})
        for _ in range(2):
            with pytest.raises(BmcUnavailable) as caught:
                POWER.get_power_state(task)
            assert str(caught.value) == (
                f"BMC at {bmc.url} did not finish answering within 0.5 s "
                "(bmc_guard.call_deadline); the call was cut off"
            )
        reached = bmc.accepted
        with pytest.raises(BreakerOpen, match="failed to answer 2 times in a row"):
            POWER.get_power_state(task)
        assert bmc.accepted == reached, "an open breaker does not call the BMC"
        wait_until("every cut connection closed", lambda: bmc.open_connections() == 0)


@pytest.mark.parametrize(
    ("credentials", "who"),
    [({"redfish_password": "wrong"}, USER), ({"redfish_username": None}, "(none)")],
)
def test_refused_credentials(auth_bmc: Bmc, credentials: dict[str, Any], who: str) -> None:
    info = {**auth_bmc.driver_info(auth_bmc.take()), **credentials}
    with pytest.raises(DriverError) as caught:
        POWER.get_power_state(Task(info))
    assert str(caught.value) == (
        f"Redfish BMC at {auth_bmc.address} refused the credentials for user {who}"
    )


def test_good_credentials_work_and_a_fixed_password_is_used_at_once(auth_bmc: Bmc) -> None:
    info = auth_bmc.driver_info(auth_bmc.take())
    with pytest.raises(DriverError, match="refused the credentials"):
        POWER.get_power_state(Task({**info, "redfish_password": "wrong"}))
    assert POWER.get_power_state(Task(info)) == POWER_OFF


def test_unknown_system_is_named(bmc: Bmc) -> None:
    info = {"redfish_address": bmc.address, "redfish_system_id": "/redfish/v1/Systems/nope"}
    with pytest.raises(DriverError) as caught:
        MANAGEMENT.get_boot_device(Task(info))
    assert str(caught.value) == (
        f"Redfish BMC at {bmc.address} has no system /redfish/v1/Systems/nope "
        "(check driver_info.redfish_system_id)"
    )


def test_system_id_may_be_omitted_only_when_the_bmc_has_one_system(
    bmc: Bmc, tmp_path: Path
) -> None:
    with pytest.raises(
        DriverError, match=rf"manages {BMC_SYSTEMS} systems; driver_info\.redfish_system_id"
    ):
        POWER.get_power_state(Task({"redfish_address": bmc.address}))
    for single in start_bmc(tmp_path, count=1):
        assert POWER.get_power_state(Task({"redfish_address": single.address})) == POWER_OFF


def test_clients_are_shared_and_dropped_after_a_failure(bmc: Bmc, task: Task) -> None:
    info = parse_driver_info(task.node.driver_info)
    assert CONNECTIONS.client(info) is CONNECTIONS.client(info)
    first = CONNECTIONS.client(info)
    CONNECTIONS.forget(info)
    assert CONNECTIONS.client(info) is not first


# -- through the API -------------------------------------------------------------


@pytest.fixture
def stack(sqlite_url: str) -> Iterator[Stack]:
    settings = load_settings(
        database={"url": sqlite_url},
        conductor={**FAST_CONDUCTOR, "hostname": "test-conductor"},
        api={"lock_wait_seconds": 0.2},
    )
    running = start_redfish_stack(settings)
    try:
        yield running
    finally:
        running.stop()


def _redfish_node(stack: Stack, info: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return create_node(stack.client, driver="redfish", driver_info=info, **fields)


def _wait_power_settled(stack: Stack, uuid: str) -> dict[str, Any]:
    def settled() -> dict[str, Any] | None:
        node = get_node(stack.client, uuid)
        return node if node["target_power_state"] is None else None

    node: dict[str, Any] = wait_until(f"node {uuid}'s power request to settle", settled)
    return node


def test_api_masks_the_bmc_password(stack: Stack, bmc: Bmc) -> None:
    node = _redfish_node(stack, bmc.driver_info(bmc.take(), redfish_password="hunter2"))
    assert node["driver_info"]["redfish_password"] == "******"
    assert get_node(stack.client, node["uuid"])["driver_info"]["redfish_password"] == "******"


def test_api_wrong_password_leaves_nodes_not_stuck(stack: Stack, auth_bmc: Bmc) -> None:
    info = {**auth_bmc.driver_info(auth_bmc.take()), "redfish_password": "wrong"}
    refused = f"Redfish BMC at {auth_bmc.address} refused the credentials for user {USER}"

    node = _redfish_node(stack, info)
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    enrolled = wait_for_state(stack.client, node["uuid"], "enroll")
    assert enrolled["last_error"] == f"Failed to verify node: {refused}"

    answer = stack.client.put(
        f"/v1/nodes/{node['uuid']}/states/power", json={"target": POWER_ON}, headers=LATEST
    )
    assert answer.status_code == 202, answer.text
    settled = _wait_power_settled(stack, node["uuid"])
    assert settled["last_error"] == f"Failed to change power state to 'power on': {refused}"
    assert settled["target_power_state"] is None


def test_api_power_manage_and_inspect(stack: Stack, bmc: Bmc) -> None:
    system = next(s for s in (bmc.take(), bmc.take()) if s.disks_gib)
    node = _redfish_node(stack, bmc.driver_info(system))
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    assert wait_for_state(stack.client, node["uuid"], "manageable")["power_state"] == POWER_OFF
    answer = stack.client.put(
        f"/v1/nodes/{node['uuid']}/states/power", json={"target": POWER_ON}, headers=LATEST
    )
    assert answer.status_code == 202
    assert _wait_power_settled(stack, node["uuid"])["power_state"] == POWER_ON
    assert bmc.system(system)["PowerState"] == "On"

    # The BIOS is flashed behind metalforge's back: inspection reads the new version.
    path = bmc.emulator.system_path(system.uuid)
    bmc.post(
        "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
        {"ImageURI": "https://fw.example.com/bios.bin", "Targets": [path]},
    )
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    inspected = wait_for_state(stack.client, node["uuid"], "manageable")
    assert inspected["properties"]["cpus"] == 8
    assert inspected["properties"]["local_gb"] == 99
    # Processed as an agent's report is: a port per NIC, the inventory stored.
    ports = stack.client.get(f"/v1/nodes/{node['uuid']}/ports", headers=LATEST).json()["ports"]
    assert [p["address"] for p in ports] == [m.lower() for m in system.macs]
    stored = stack.client.get(f"/v1/nodes/{node['uuid']}/inventory", headers=LATEST).json()
    assert stored["inventory"]["memory"] == {"physical_mb": 16384}
    assert stored["plugin_data"]["local_gb"] == 99
    firmware = stack.client.get(f"/v1/nodes/{node['uuid']}/firmware", headers=LATEST).json()
    bios = next(c for c in firmware["firmware"] if c["component"] == "bios")
    assert (bios["initial_version"], bios["current_version"]) == ("1.0.0", "1.1.0")


def test_inspection_rules_act_on_an_out_of_band_inspection(stack: Stack, bmc: Bmc) -> None:
    """Rules see the inventory read from the BMC, as Ironic's redfish inspection runs
    them; a ``fail`` rule fails the inspection with its message."""
    rules = [
        {
            "description": "big memory",
            "conditions": [{"op": "!lt", "args": ["{inventory[memory][physical_mb]}", 16384]}],
            "actions": [
                {"op": "add-trait", "args": {"name": "CUSTOM_BIG_MEMORY"}},
                {
                    "op": "set-capability",
                    "args": {"name": "vendor", "value": "{inventory[system_vendor][manufacturer]}"},
                },
            ],
        },
        {
            "description": "no disk",
            "conditions": [{"op": "is-empty", "args": ["{inventory[disks]}"]}],
            "actions": [{"op": "fail", "args": {"msg": "a machine without disks"}}],
        },
    ]
    for rule in rules:
        made = stack.client.post("/v1/inspection_rules", json=rule, headers=LATEST)
        assert made.status_code == 201, made.text
    with_disk, without = sorted((bmc.take(), bmc.take()), key=lambda s: not s.disks_gib)
    nodes = [_redfish_node(stack, bmc.driver_info(s)) for s in (with_disk, without)]
    for node in nodes:
        assert provision(stack.client, node["uuid"], "manage").status_code == 202
        wait_for_state(stack.client, node["uuid"], "manageable")
        assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    done = wait_for_state(stack.client, nodes[0]["uuid"], "manageable")
    traits = stack.client.get(f"/v1/nodes/{done['uuid']}/traits", headers=LATEST).json()
    assert traits["traits"] == ["CUSTOM_BIG_MEMORY"]
    assert "vendor:Sushy Emulator" in done["properties"]["capabilities"]
    failed = wait_for_state(stack.client, nodes[1]["uuid"], "inspect failed")
    assert "a machine without disks" in failed["last_error"]


def test_api_bios_settings_are_read_at_verify_and_after_each_step(stack: Stack, bmc: Bmc) -> None:
    system = bmc.take()
    node = _redfish_node(stack, bmc.driver_info(system))
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    url = f"/v1/nodes/{node['uuid']}/bios"
    listed = stack.client.get(f"{url}?detail=true", headers=LATEST).json()["bios"]
    emulated = bmc.system(system, "/BIOS")["Attributes"]
    assert {s["name"] for s in listed} == set(emulated)
    turbo = next(s for s in listed if s["name"] == "ProcTurboMode")
    assert turbo["value"] == "Enabled"
    assert turbo["attribute_type"] == "Enumeration"
    assert turbo["allowable_values"] == ["Enabled", "Disabled"]

    turbo_off = [{"name": "ProcTurboMode", "value": "Disabled"}]
    step = {"interface": "bios", "step": "apply_configuration", "args": {"settings": turbo_off}}
    assert (
        provision(
            stack.client, node["uuid"], "clean", clean_steps=[step], disable_ramdisk=True
        ).status_code
        == 202
    )
    assert wait_for_state(stack.client, node["uuid"], "manageable")["last_error"] is None
    shown = stack.client.get(f"{url}/ProcTurboMode", headers=LATEST).json()["ProcTurboMode"]
    assert shown["value"] == "Disabled"
    assert shown["updated_at"] is not None

    # A value the registry refuses fails the step before the BMC is asked.
    bad = {**step, "args": {"settings": [{"name": "ProcTurboMode", "value": "Turbo"}]}}
    assert (
        provision(
            stack.client, node["uuid"], "clean", clean_steps=[bad], disable_ramdisk=True
        ).status_code
        == 202
    )
    failed = wait_for_state(stack.client, node["uuid"], "clean failed")
    assert "must be one of Enabled, Disabled" in failed["last_error"]
    assert bmc.system(system, "/BIOS")["Attributes"]["ProcTurboMode"] == "Disabled"


def test_api_firmware_update_through_the_update_service(
    stack: Stack, bmc: Bmc, images: str
) -> None:
    system = bmc.take()
    node = _redfish_node(stack, bmc.driver_info(system))
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    url = f"/v1/nodes/{node['uuid']}/firmware"
    found = {c["component"]: c for c in stack.client.get(url, headers=LATEST).json()["firmware"]}
    assert found["bios"]["current_version"] == "1.0.0"
    assert found["bios"]["initial_version"] == "1.0.0"
    assert found["bmc"]["current_version"]

    update = {"component": "bios", "url": f"{images}/deploy.iso"}
    step = {"interface": "firmware", "step": "update", "args": {"settings": [update]}}
    answer = provision(
        stack.client, node["uuid"], "clean", clean_steps=[step], disable_ramdisk=True
    )
    assert answer.status_code == 202, answer.text
    assert wait_for_state(stack.client, node["uuid"], "manageable")["last_error"] is None
    assert bmc.system(system)["BiosVersion"] == "1.1.0"
    found = {c["component"]: c for c in stack.client.get(url, headers=LATEST).json()["firmware"]}
    bios = found["bios"]
    assert (bios["initial_version"], bios["current_version"], bios["last_version_flashed"]) == (
        "1.0.0",
        "1.1.0",
        "1.1.0",
    )

    # The emulator's UpdateService refuses a manager target: the step fails with its reason.
    bmc_update = {**step, "args": {"settings": [{"component": "bmc", "url": update["url"]}]}}
    answer = provision(
        stack.client, node["uuid"], "clean", clean_steps=[bmc_update], disable_ramdisk=True
    )
    assert answer.status_code == 202, answer.text
    failed = wait_for_state(stack.client, node["uuid"], "clean failed")
    assert "Manager is not currently a supported Target" in failed["last_error"]


def test_api_virtual_media_changes_the_emulator(stack: Stack, bmc: Bmc, images: str) -> None:
    system = bmc.take()
    node = _redfish_node(stack, bmc.driver_info(system))
    url = f"/v1/nodes/{node['uuid']}/vmedia"
    iso = f"{images}/deploy.iso"
    body = {"device_type": "cdrom", "image_url": iso, "image_download_source": "http"}
    # Answered once queued, as Ironic's; the node's conductor then calls the BMC.
    assert stack.client.post(url, json=body, headers=LATEST).status_code == 204
    wait_until("the image inserted", lambda: bmc.system(system, "/VirtualMedia/Cd")["Image"])
    assert bmc.system(system, "/VirtualMedia/Cd")["Image"] == iso
    listed = stack.client.get(url, headers=LATEST).json()
    assert {"media_types": ["CD", "DVD"], "inserted": True, "image": iso} in listed
    missing = {**body, "image_url": f"{images}/missing.iso"}
    assert stack.client.post(url, json=missing, headers=LATEST).status_code == 204
    failed = wait_until(
        "the attach failed", lambda: get_node(stack.client, node["uuid"])["last_error"]
    )
    assert f"Could not attach device cdrom to node {node['uuid']}" in failed
    assert "answered HTTP 400" in failed
    assert stack.client.delete(url, headers=LATEST).status_code == 204
    wait_until(
        "the image ejected",
        lambda: bmc.system(system, "/VirtualMedia/Cd")["Inserted"] is False,
    )


def test_api_boot_device(stack: Stack, bmc: Bmc) -> None:
    system = bmc.take()
    node = _redfish_node(stack, bmc.driver_info(system), name="bd-1")
    path = "/v1/nodes/bd-1/management/boot_device"

    supported = stack.client.get(f"{path}/supported", headers=LATEST)
    assert supported.json() == {"supported_boot_devices": ["pxe", "disk", "cdrom", "uefihttp"]}
    answer = stack.client.put(path, json={"boot_device": "pxe"}, headers=LATEST)
    assert answer.status_code == 204, answer.text
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert stack.client.get(path, headers=LATEST).json() == {
        "boot_device": "pxe",
        "persistent": True,  # the emulator reads back Continuous
    }
    history = stack.client.get(f"/v1/nodes/{node['uuid']}/history", headers=LATEST).json()
    assert any("boot device set to pxe" in e["event"] for e in history["history"])
    assert get_node(stack.client, node["uuid"])["reservation"] is None

    answer = stack.client.put(path, json={"boot_device": "bios"}, headers=LATEST)
    assert answer.status_code == 400
    assert error_text(answer) == (
        f"Boot device 'bios' is not supported by node {node['uuid']}; "
        "supported: pxe, disk, cdrom, uefihttp"
    )
    answer = stack.client.put(path, json={"boot_device": "floppy"}, headers=LATEST)
    assert answer.status_code == 400
    assert "Invalid boot device 'floppy'" in error_text(answer)
    missing = stack.client.put(
        "/v1/nodes/no-such-node/management/boot_device", json={"boot_device": "pxe"}
    )
    assert missing.status_code == 404


def test_api_boot_device_on_a_locked_node_or_a_failing_bmc(
    stack: Stack, bmc: Bmc, auth_bmc: Bmc
) -> None:
    node = _redfish_node(stack, bmc.driver_info(bmc.take()))
    with stack.db.write() as session:
        session.execute(update(Node).where(Node.uuid == node["uuid"]).values(reservation="other"))
    path = f"/v1/nodes/{node['uuid']}/management/boot_device"
    answer = stack.client.put(path, json={"boot_device": "pxe"}, headers=LATEST)
    assert answer.status_code == 409
    assert "is locked by host other" in error_text(answer)

    info = {**auth_bmc.driver_info(auth_bmc.take()), "redfish_password": "wrong"}
    failing = _redfish_node(stack, info)
    path = f"/v1/nodes/{failing['uuid']}/management/boot_device"
    for answer in (
        stack.client.put(path, json={"boot_device": "pxe", "persistent": True}, headers=LATEST),
        stack.client.get(path, headers=LATEST),
    ):
        assert answer.status_code == 400
        assert "refused the credentials for user admin" in error_text(answer)
    assert get_node(stack.client, failing["uuid"])["reservation"] is None


def test_api_boot_device_on_fake_hardware(stack: Stack) -> None:
    node = create_node(stack.client, name="fake-bd")
    path = "/v1/nodes/fake-bd/management/boot_device"
    answer = stack.client.put(
        path, json={"boot_device": "disk", "persistent": True}, headers=LATEST
    )
    assert answer.status_code == 204
    assert stack.client.get(path, headers=LATEST).json() == {
        "boot_device": "disk",
        "persistent": True,
    }
    # Names need API 1.5; the default version (1.1) knows nodes by UUID only.
    assert stack.client.get(path).status_code == 404
    assert get_node(stack.client, node["uuid"])["driver_internal_info"]["fake_boot_device"] == (
        "disk"
    )


def test_emulator_passes_the_stock_external_notification_through(tmp_path: Path) -> None:
    received: list[dict[str, Any]] = []

    class Listener(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            length = int(self.headers["Content-Length"])
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/notify"
    system = replace(fake_system(), external_notifier=True)
    try:
        for notifying in start_bmc(tmp_path, systems=[system], notification_url=url):
            POWER.set_power_state(Task(notifying.driver_info(system)), POWER_ON)
    finally:
        server.shutdown()
        server.server_close()
    assert received, "the emulator sent no notification"
    assert received[-1]["uuid"] == system.uuid
    assert received[-1]["power_state"] == "On"


def test_fake_system_helper_gives_unique_systems() -> None:
    a, b = fake_system(), fake_system()
    assert a.uuid != b.uuid
    assert a.macs != b.macs


def test_health_is_the_systems_status(bmc: Bmc, system: FakeSystem, task: Task) -> None:
    """The emulator's systems report ``Status.Health``; it reads as Ironic's health value."""
    assert MANAGEMENT.get_health(task) == "OK"
