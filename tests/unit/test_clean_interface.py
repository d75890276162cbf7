"""The driver side of cleaning: listing and running an interface's clean steps, RAID rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from metalforge.db.bios_settings import Setting
from metalforge.db.models import Node
from metalforge.drivers.base import ReadOnlyTask, StepFailed
from metalforge.drivers.fake import FakeBios, FakeDeploy, FakeRaid
from metalforge.drivers.raid import InvalidRaidConfig, check_target_raid_config
from metalforge.drivers.step_declarations import clean_step


class _BiosKeepingTask(ReadOnlyTask):
    """Keeps the BIOS settings a step stores, as the conductor's task writes them."""

    bios: tuple[Setting, ...] | None = None

    def store_bios_settings(self, settings: Sequence[Setting]) -> None:
        self.bios = tuple(settings)


def _node(**fields: Any) -> Node:
    return Node(
        uuid="u",
        driver="fake-hardware",
        driver_info=fields.pop("driver_info", {}),
        driver_internal_info={},
        target_raid_config=fields.pop("target_raid_config", {}),
        raid_config={},
        **fields,
    )


def test_get_clean_steps_lists_every_clean_step_highest_priority_first() -> None:
    task = ReadOnlyTask(_node())
    deploy = [(d.method, d.priority) for d in FakeDeploy().get_steps(task, "clean")]
    # Deploy steps are not clean steps; priority 0 steps are listed (manual cleaning).
    assert deploy == [("erase_devices_metadata", 99), ("erase_devices", 10)]
    raid = FakeRaid().get_steps(task, "clean")
    assert [(d.method, d.priority) for d in raid] == [
        ("create_configuration", 0),
        ("delete_configuration", 0),
    ]
    create = raid[0]
    assert (create.abortable, create.asynchronous, create.requires_ramdisk) == (False, True, False)
    assert set(create.argsinfo) == {"create_root_volume", "create_nonroot_volumes"}


def test_clean_step_decorator_records_its_declaration() -> None:
    class Decorated(FakeBios):
        @clean_step(
            priority=5,
            abortable=True,
            argsinfo={"level": {"description": "How hard.", "required": True}},
            requires_ramdisk=False,
        )
        def scrub(self, task: Any, level: int) -> None:
            """Scrub."""

    (scrub,) = [d for d in Decorated().get_steps(ReadOnlyTask(_node()), "clean") if d.priority]
    assert (scrub.kind, scrub.method, scrub.priority, scrub.abortable) == (
        "clean",
        "scrub",
        5,
        True,
    )
    assert scrub.requires_ramdisk is False
    assert scrub.argsinfo["level"].required is True
    assert scrub.argsinfo["level"].description == "How hard."


def test_execute_clean_step_runs_the_step_with_its_arguments() -> None:
    node = _node(
        target_raid_config={
            "logical_disks": [
                {"raid_level": "1", "size_gb": 10, "is_root_volume": True},
                {"raid_level": "0", "size_gb": 20},
            ]
        }
    )
    task = _BiosKeepingTask(node)
    step = {"interface": "raid", "step": "create_configuration", "args": {}}
    assert FakeRaid().execute_step(
        task, "clean", {**step, "args": {"create_root_volume": False}}
    ) == ("done")
    assert [d["raid_level"] for d in node.raid_config["logical_disks"]] == ["0"]
    with pytest.raises(StepFailed, match="invalid argument create_root_volume"):
        FakeRaid().execute_step(task, "clean", {**step, "args": {"create_root_volume": "no"}})
    bios = {"interface": "bios", "step": "apply_configuration"}
    FakeBios().execute_step(
        task, "clean", {**bios, "args": {"settings": [{"name": "a", "value": 1}]}}
    )
    assert node.driver_internal_info["fake_bios"] == {"a": 1}
    assert task.bios == (Setting("a", "1"),)
    with pytest.raises(StepFailed, match="invalid argument settings"):
        FakeBios().execute_step(task, "clean", {**bios, "args": {"settings": "a=1"}})


def test_fake_fail_steps_and_asynchronous_steps() -> None:
    failing = _node(driver_info={"fake_fail_steps": "deploy.erase_devices, raid.x"})
    step = {"interface": "deploy", "step": "erase_devices", "args": {}}
    with pytest.raises(StepFailed, match=r"deploy\.erase_devices"):
        FakeDeploy().execute_step(ReadOnlyTask(failing), "clean", step)
    slow = _node(driver_info={"fake_step_delay": 30})
    task = ReadOnlyTask(slow)
    assert FakeDeploy().execute_step(task, "clean", step) == "wait"
    assert FakeDeploy().check_step(task, "erase_devices") == "wait"
    FakeDeploy().abort_step(task, "erase_devices")
    assert "fake_async_done_at" not in slow.driver_internal_info


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"logical_disks": "all"}, "must be a list"),
        ({"disks": []}, "unknown key(s) disks"),
        ({"logical_disks": ["raid1"]}, "logical_disks[0] must be an object"),
        ({"logical_disks": [{"size_gb": 1}]}, "logical_disks[0] needs raid_level"),
        ({"logical_disks": [{"raid_level": 1, "size_gb": 1}]}, "raid_level 1 is not one of"),
        ({"logical_disks": [{"raid_level": "1", "size_gb": "ALL"}]}, "size_gb"),
        (
            {"logical_disks": [{"raid_level": "1", "size_gb": 1, "is_root_volume": "yes"}]},
            "is_root_volume must be true or false",
        ),
        (
            {"logical_disks": [{"raid_level": "1", "size_gb": 1, "number_of_physical_disks": 0}]},
            "number_of_physical_disks",
        ),
        (
            {"logical_disks": [{"raid_level": "1", "size_gb": 1, "volume_name": 7}]},
            "volume_name must be a string",
        ),
        (
            {"logical_disks": [{"raid_level": "1", "size_gb": 1, "controller": "software",
                                "physical_disks": [{"name": "/dev/sda"}]}]},
            "as hints must name two or more",
        ),
        (
            {"logical_disks": [{"raid_level": "1", "size_gb": 1, "controller": "c",
                                "physical_disks": ["a", {"name": "/dev/sda"}]}]},
            "a list of names, or of root device hints",
        ),
    ],
)  # fmt: skip
def test_invalid_raid_configs_are_refused_naming_the_field(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRaidConfig) as caught:
        check_target_raid_config(config)
    assert message in str(caught.value)


def test_valid_raid_configs() -> None:
    check_target_raid_config({})
    # Software RAID as Metal3 asks for it: disks by root device hints.
    check_target_raid_config(
        {
            "logical_disks": [
                {
                    "raid_level": "1",
                    "size_gb": "MAX",
                    "controller": "software",
                    "physical_disks": [{"name": "s== /dev/sda"}, {"name": "s== /dev/sdb"}],
                }
            ]
        }
    )
    check_target_raid_config(
        {
            "logical_disks": [
                {
                    "raid_level": "1+0",
                    "size_gb": "MAX",
                    "volume_name": "root",
                    "is_root_volume": True,
                    "share_physical_disks": False,
                    "disk_type": "ssd",
                    "interface_type": "sas",
                    "number_of_physical_disks": 4,
                    "controller": "RAID.Integrated.1-1",
                    "physical_disks": ["Disk.Bay.0", "Disk.Bay.1", "Disk.Bay.2", "Disk.Bay.3"],
                },
                {"raid_level": "JBOD", "size_gb": 500},
            ]
        }
    )
