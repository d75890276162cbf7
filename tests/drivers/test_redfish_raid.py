"""The ``redfish`` RAID interface against the lab's Redfish BMC with a RAID controller."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from metalforge.drivers.base import REBOOT, DriverError, Interface, StepFailed
from metalforge.drivers.redfish.power import RedfishPower
from metalforge.drivers.redfish.raid import RedfishRaid
from metalforge_lab.redfish_emulator import FakeSystem
from tests.drivers.test_redfish import Task
from tests.support.api import LATEST, create_node, error_text, provision, wait_for_state
from tests.support.redfish import Bmc, fake_system, running_stack, start_bmc
from tests.support.stack import Stack

RAID = RedfishRaid()
GIB = 1024**3


def _controller(apply_time: str | None = None) -> dict[str, Any]:
    drives = [
        {
            "Id": f"Disk.{i}",
            "Name": f"Drive {i}",
            "CapacityBytes": size * GIB,
            "MediaType": media,
            "Protocol": protocol,
        }
        for i, (size, media, protocol) in enumerate(
            [
                (100, "HDD", "SAS"),
                (100, "HDD", "SAS"),
                (200, "HDD", "SAS"),
                (200, "HDD", "SAS"),
                (200, "HDD", "SAS"),
                (50, "SSD", "SATA"),
                (50, "SSD", "SATA"),
            ]
        )
    ]
    return {"id": "RAID.Integrated.1", "name": "PERC", "drives": drives, "apply_time": apply_time}


def _with_controller(apply_time: str | None) -> FakeSystem:
    return dataclasses.replace(fake_system(), storage=_controller(apply_time))


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    systems = [_with_controller(None) for _ in range(16)] + [
        _with_controller("Immediate"),
        _with_controller("OnReset"),
    ]
    yield from start_bmc(tmp_path_factory.mktemp("raid-bmc"), systems=systems)


class PoweredTask(Task):
    """A task whose node's power interface is the Redfish one, counting reboots."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(info)
        self.rebooted = 0

    def interface(self, family: str) -> Interface:
        assert family == "power"
        task = self

        class Counted(RedfishPower):
            def set_power_state(self, t: Any, target: str, timeout: int | None = None) -> None:
                task.rebooted += target == REBOOT
                super().set_power_state(t, target, timeout)

        return Counted()


def _task(bmc: Bmc, system: FakeSystem, logical_disks: list[dict[str, Any]]) -> PoweredTask:
    task = PoweredTask(bmc.driver_info(system))
    task.node.target_raid_config = {"logical_disks": logical_disks}
    return task


def _volumes(bmc: Bmc, system: FakeSystem) -> list[dict[str, Any]]:
    base = "/Storage/RAID.Integrated.1/Volumes"
    members = bmc.system(system, base)["Members"]
    return [bmc.get(m["@odata.id"]) for m in members]


def _take(bmc: Bmc, apply_time: str | None = None) -> FakeSystem:
    return bmc.take(lambda system: (system.storage or {}).get("apply_time") == apply_time)


def test_a_configuration_becomes_volumes_and_is_read_back(bmc: Bmc) -> None:
    system = _take(bmc)
    task = _task(
        bmc,
        system,
        [
            {"raid_level": "1", "size_gb": 80, "is_root_volume": True, "volume_name": "root"},
            {
                "raid_level": "0",
                "size_gb": "MAX",
                "controller": "RAID.Integrated.1",
                "physical_disks": ["Disk.5", "Disk.6"],
                "volume_name": "scratch",
            },
            {"raid_level": "5", "size_gb": 150, "disk_type": "hdd", "volume_name": "data"},
        ],
    )
    assert RAID.create_configuration(task) == "done"
    made = {v["Name"]: v for v in _volumes(bmc, system)}
    assert {name: v["RAIDType"] for name, v in made.items()} == {
        "root": "RAID1",
        "scratch": "RAID0",
        "data": "RAID5",
    }
    assert made["root"]["CapacityBytes"] == 80 * GIB
    # MAX: no CapacityBytes sent, the controller makes it as large as the drives allow.
    assert made["scratch"]["CapacityBytes"] == 100 * GIB
    drives = {
        name: [d["@odata.id"].rsplit("/", 1)[1] for d in v["Links"]["Drives"]]
        for name, v in made.items()
    }
    # The smallest drives that fit (the 50 GiB ones cannot hold 80), never one another
    # volume holds, of the type asked for.
    assert drives == {
        "root": ["Disk.0", "Disk.1"],
        "scratch": ["Disk.5", "Disk.6"],
        "data": ["Disk.2", "Disk.3", "Disk.4"],
    }
    shown = task.node.raid_config["logical_disks"]
    assert sorted((d["name"], d["raid_level"], d["size_gb"], d["controller"]) for d in shown) == [
        ("data", "5", 150, "RAID.Integrated.1"),
        ("root", "1", 80, "RAID.Integrated.1"),
        ("scratch", "0", 100, "RAID.Integrated.1"),
    ]
    assert task.node.raid_config["last_updated"]
    assert "raid_job" not in task.node.driver_internal_info


def test_delete_configuration_removes_every_raid_volume(bmc: Bmc) -> None:
    system = _take(bmc)
    task = _task(bmc, system, [{"raid_level": "1", "size_gb": 10}])
    RAID.create_configuration(task)
    assert len(_volumes(bmc, system)) == 1
    assert RAID.delete_configuration(task) == "done"
    assert _volumes(bmc, system) == []
    assert task.node.raid_config["logical_disks"] == []


def test_delete_existing_replaces_what_the_controller_had(bmc: Bmc) -> None:
    system = _take(bmc)
    task = _task(bmc, system, [{"raid_level": "1", "size_gb": 90}])
    RAID.create_configuration(task)
    task.node.target_raid_config = {"logical_disks": [{"raid_level": "0", "size_gb": 20}]}
    # Without delete_existing the drives the first volume holds are not handed out again.
    RAID.create_configuration(task)
    assert sorted(v["RAIDType"] for v in _volumes(bmc, system)) == ["RAID0", "RAID1"]
    RAID.create_configuration(task, delete_existing=True)
    assert [v["RAIDType"] for v in _volumes(bmc, system)] == ["RAID0"]


def test_only_the_volumes_asked_for_are_created(bmc: Bmc) -> None:
    system = _take(bmc)
    disks = [
        {"raid_level": "1", "size_gb": 10, "is_root_volume": True, "volume_name": "root"},
        {"raid_level": "0", "size_gb": 10, "volume_name": "data"},
    ]
    RAID.create_configuration(_task(bmc, system, disks), create_nonroot_volumes=False)
    assert [v["Name"] for v in _volumes(bmc, system)] == ["root"]


@pytest.mark.parametrize(
    ("disks", "message"),
    [
        ([{"raid_level": "1", "size_gb": 500}], "no 2 free drives of one controller can hold it"),
        ([{"raid_level": "JBOD", "size_gb": 10}], "RAID level JBOD is not supported"),
        ([{"raid_level": "0", "size_gb": "MAX"}], "must name its physical_disks"),
        (
            [
                {
                    "raid_level": "1",
                    "size_gb": 10,
                    "controller": "RAID.Integrated.1",
                    "physical_disks": ["Disk.0", "Disk.9"],
                }
            ],
            "the BMC reports no drive Disk.9",
        ),
        (
            [
                {"raid_level": "0", "size_gb": 10, "controller": "c", "physical_disks": ["Disk.0"]},
                {"raid_level": "0", "size_gb": 10, "controller": "c", "physical_disks": ["Disk.0"]},
            ],
            "Disk.0 already hold another volume",
        ),
    ],
)
def test_a_configuration_that_cannot_be_placed_fails_before_anything_is_sent(
    bmc: Bmc, disks: list[dict[str, Any]], message: str
) -> None:
    system = _take(bmc)
    with pytest.raises(StepFailed, match=message):
        RAID.create_configuration(_task(bmc, system, disks))
    assert _volumes(bmc, system) == []


def test_a_node_without_a_target_and_scsi_drives_are_refused(bmc: Bmc) -> None:
    system = _take(bmc)
    with pytest.raises(StepFailed, match="no target_raid_config"):
        RAID.create_configuration(_task(bmc, system, []))
    config = {"logical_disks": [{"raid_level": "1", "size_gb": 10, "interface_type": "scsi"}]}
    with pytest.raises(DriverError, match="scsi is not supported"):
        RAID.validate_raid_config(_task(bmc, system, []), config)
    hints = [{"name": "/dev/sda"}, {"name": "/dev/sdb"}]
    software = {
        "logical_disks": [
            {"raid_level": "1", "size_gb": "MAX", "controller": "software", "physical_disks": hints}
        ]
    }
    with pytest.raises(DriverError, match="are for software RAID"):
        RAID.validate_raid_config(_task(bmc, system, []), software)


def test_a_controller_offering_immediate_is_asked_for_it(bmc: Bmc) -> None:
    system = _take(bmc, "Immediate")
    task = _task(bmc, system, [{"raid_level": "1", "size_gb": 10}])
    assert RAID.create_configuration(task) == "done"
    assert [v["RAIDType"] for v in _volumes(bmc, system)] == ["RAID1"]


def test_a_controller_that_applies_at_reset_is_rebooted_and_waited_for(bmc: Bmc) -> None:
    """Each change is queued behind a task monitor until the system resets: the node is
    rebooted, the step waits until the monitor says the task finished, then goes on."""
    system = _take(bmc, "OnReset")
    task = _task(
        bmc,
        system,
        [
            {"raid_level": "1", "size_gb": 10, "volume_name": "a"},
            {"raid_level": "1", "size_gb": 10, "volume_name": "b"},
        ],
    )
    assert RAID.create_configuration(task) == "wait"
    assert task.node.driver_internal_info["raid_job"]["monitor"]
    rounds = 0
    while RAID.check_step(task, "create_configuration") == "wait":
        rounds += 1
        assert rounds < 10, task.node.driver_internal_info
    assert sorted(v["Name"] for v in _volumes(bmc, system)) == ["a", "b"]
    assert task.rebooted == 2  # one reset per queued change
    assert [d["name"] for d in task.node.raid_config["logical_disks"]] == ["a", "b"]


# -- through the API, as Metal3 asks for it ------------------------------------------


@pytest.fixture
def stack(sqlite_url: str) -> Iterator[Stack]:
    yield from running_stack(sqlite_url)


def test_metal3s_hardware_raid_through_the_api(stack: Stack, bmc: Bmc) -> None:
    """What Metal3 sends for a Redfish host's RAID: the node created with
    ``raid_interface: redfish``, the target set with ``PUT .../states/raid``, then manual
    cleaning with ``raid.delete_configuration`` and ``raid.create_configuration``."""
    system = _take(bmc)
    client = stack.client
    created = create_node(
        client, driver="redfish", driver_info=bmc.driver_info(system), raid_interface="redfish"
    )
    uuid = created["uuid"]
    assert created["raid_interface"] == "redfish"
    plain = create_node(client, driver="redfish", driver_info=bmc.driver_info(_take(bmc)))
    assert plain["raid_interface"] == "redfish", "Ironic's default for the redfish type"
    target = {
        "logical_disks": [
            {"raid_level": "1", "size_gb": 80, "is_root_volume": True, "volume_name": "root"}
        ]
    }
    answer = client.put(f"/v1/nodes/{uuid}/states/raid", json=target, headers=LATEST)
    assert answer.status_code == 204, answer.text
    assert provision(client, uuid, "manage").status_code == 202
    wait_for_state(client, uuid, "manageable")
    steps = [
        {"interface": "raid", "step": "delete_configuration"},
        {"interface": "raid", "step": "create_configuration"},
    ]
    assert provision(client, uuid, "clean", clean_steps=steps).status_code == 202
    done = wait_for_state(client, uuid, "manageable")
    assert done["last_error"] is None
    [disk] = done["raid_config"]["logical_disks"]
    assert (disk["name"], disk["raid_level"], disk["size_gb"]) == ("root", "1", 80)
    assert [v["Name"] for v in _volumes(bmc, system)] == ["root"]
    scsi = {"logical_disks": [{"raid_level": "1", "size_gb": 10, "interface_type": "scsi"}]}
    refused = client.put(f"/v1/nodes/{uuid}/states/raid", json=scsi, headers=LATEST)
    assert refused.status_code == 400
    assert "scsi is not supported" in error_text(refused)
