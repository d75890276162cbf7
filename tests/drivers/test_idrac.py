"""The ``idrac`` hardware type against the lab's Redfish BMC acting as an iDRAC (Dell OEM)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.drivers.base import DriverError
from metalforge.drivers.redfish.idrac import IdracManagement, IdracVirtualMediaBoot
from metalforge_lab.redfish_emulator import FakeSystem
from tests.drivers.test_redfish import Task
from tests.metal3.test_virtual_media_hosts import HOSTS
from tests.support.api import LATEST, create_node, provision, wait_for_state
from tests.support.redfish import (
    Bmc,
    fake_system,
    running_stack,
    serve_directory,
    start_bmc,
)
from tests.support.stack import Stack

BOOT = IdracVirtualMediaBoot()
MANAGEMENT = IdracManagement()


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    systems = [dataclasses.replace(fake_system(), dell=True) for _ in range(8)]
    systems += [fake_system() for _ in range(2)]
    yield from start_bmc(tmp_path_factory.mktemp("idrac"), systems=systems)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    www: Path = tmp_path_factory.mktemp("www")
    (www / "deploy.iso").write_bytes(b"\0" * 4096)
    yield from serve_directory(www)


def _idrac(bmc: Bmc) -> FakeSystem:
    return bmc.take(lambda system: system.dell)


def _lab(bmc: Bmc, system: FakeSystem) -> dict[str, Any]:
    """What the iDRAC was asked, as the lab's manager shows it."""
    manager = bmc.get(f"/redfish/v1/Managers/{system.uuid}")
    lab: dict[str, Any] = manager["Oem"]["Dell"]["Lab"]
    return lab


def test_the_virtual_cd_is_made_the_boot_device_the_idracs_way(bmc: Bmc, images: str) -> None:
    """An iDRAC takes ``Cd`` through ``ImportSystemConfiguration``, once for the ramdisk;
    the instance's disk through the standard override."""
    system = _idrac(bmc)
    task = Task(bmc.driver_info(system, deploy_iso=f"{images}/deploy.iso"))
    BOOT.prepare_ramdisk(task)
    assert bmc.system(system, "/VirtualMedia/Cd")["Inserted"] is True
    assert _lab(bmc, system)["LastImport"] == {"device": "Cd", "once": True}
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Cd"
    BOOT.prepare_instance(task)
    assert bmc.system(system)["Boot"]["BootSourceOverrideTarget"] == "Hdd"
    assert bmc.system(system, "/VirtualMedia/Cd")["Inserted"] is False


def test_a_bmc_that_is_no_idrac_is_refused_clearly(bmc: Bmc, images: str) -> None:
    system = bmc.take(lambda system: not system.dell)
    task = Task(bmc.driver_info(system, deploy_iso=f"{images}/deploy.iso"))
    with pytest.raises(DriverError, match="no Dell OEM extension: it is not an iDRAC"):
        BOOT.prepare_ramdisk(task)
    with pytest.raises(DriverError, match="not an iDRAC"):
        MANAGEMENT.clear_job_queue(task)


def test_clear_job_queue_reset_and_known_good_state(bmc: Bmc) -> None:
    system = _idrac(bmc)
    task = Task(bmc.driver_info(system))
    MANAGEMENT.clear_job_queue(task)
    assert _lab(bmc, system)["Jobs"] == 0
    assert MANAGEMENT.reset_idrac(task) == "wait"
    assert _lab(bmc, system)["Resets"] == 1
    # The lab's iDRAC answers "not ready" twice after a reset, then "ready".
    outcomes = [MANAGEMENT.check_step(task, "reset_idrac") for _ in range(3)]
    assert outcomes == ["wait", "wait", "done"]
    assert "idrac_reset" not in task.node.driver_internal_info
    assert MANAGEMENT.known_good_state(task) == "wait"
    while MANAGEMENT.check_step(task, "known_good_state") == "wait":
        pass
    assert _lab(bmc, system)["Resets"] == 2
    steps = {d.method for d in MANAGEMENT.steps() if d.kind == "clean"}
    assert {"clear_job_queue", "reset_idrac", "known_good_state"} <= steps


@pytest.fixture
def stack(sqlite_url: str) -> Iterator[Stack]:
    yield from running_stack(sqlite_url, "fake-hardware", "idrac")


def test_metal3s_idrac_virtualmedia_host_enrolls_and_is_managed(stack: Stack, bmc: Bmc) -> None:
    """What Metal3 creates for ``idrac-virtualmedia://``, then the iDRAC's clean step."""
    system = _idrac(bmc)
    host = HOSTS["idrac-virtualmedia"]
    interfaces = {key: value for key, value in host.items() if key != "driver"}
    interfaces["inspect_interface"] = "redfish"
    node = create_node(
        stack.client, driver="idrac", driver_info=bmc.driver_info(system), **interfaces
    )
    assert {key: node[key] for key in interfaces} == interfaces
    uuid = node["uuid"]
    assert provision(stack.client, uuid, "manage").status_code == 202
    assert wait_for_state(stack.client, uuid, "manageable")["last_error"] is None
    step = {"interface": "management", "step": "known_good_state"}
    assert provision(stack.client, uuid, "clean", clean_steps=[step]).status_code == 202
    assert wait_for_state(stack.client, uuid, "manageable")["last_error"] is None
    assert _lab(bmc, system)["Resets"] == 1
    drivers = stack.client.get("/v1/drivers", headers=LATEST).json()["drivers"]
    assert "idrac" in {d["name"] for d in drivers}
