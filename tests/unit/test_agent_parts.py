"""The pure parts of the agent deploy interface: image_info, erasure records, step merging."""

from __future__ import annotations

import re

import pytest

from metalforge.db.flow_progress import NO_FLOW, FlowProgress
from metalforge.db.models import Node
from metalforge.drivers.agent.client import CommandResult
from metalforge.drivers.agent.deploy import AGENT_BOOT_RETRY, AgentDeploy
from metalforge.drivers.agent.erasure import describe, records_from_result
from metalforge.drivers.agent.image import image_info
from metalforge.drivers.agent.session import merge_agent_steps, node_for_agent
from metalforge.drivers.base import ReadOnlyTask, StepFailed, StepsNotKnown

SHA256 = "ab" * 32


@pytest.mark.parametrize(
    ("given", "algo", "value"),
    [
        ({"image_checksum": f"sha256:{SHA256.upper()}"}, "sha256", SHA256),
        ({"image_checksum": SHA256}, "sha256", SHA256),
        ({"image_checksum": "c" * 128}, "sha512", "c" * 128),
        ({"image_os_hash_algo": "sha512", "image_os_hash_value": "d" * 128}, "sha512", "d" * 128),
    ],
)
def test_image_info_names_the_hash_the_agent_verifies(
    given: dict[str, str], algo: str, value: str
) -> None:
    info = image_info({"image_source": "http://10.0.0.1/images/disk.raw", **given}, "n1")
    assert (info["os_hash_algo"], info["os_hash_value"]) == (algo, value)
    assert info["id"] == "disk.raw"
    assert info["urls"] == ["http://10.0.0.1/images/disk.raw"]
    assert info["stream_raw_images"] is True
    assert "checksum" not in info, "the legacy md5 field is never sent"


def test_image_info_streams_only_raw_images() -> None:
    info = image_info(
        {
            "image_source": "https://x/a.qcow2",
            "image_checksum": SHA256,
            "image_disk_format": "qcow2",
        },
        "n1",
    )
    assert info["stream_raw_images"] is False
    assert info["disk_format"] == "qcow2"


@pytest.mark.parametrize(
    ("instance_info", "words"),
    [
        ({}, "image_source is not set"),
        ({"image_source": "file:///x.raw", "image_checksum": SHA256}, "not an http(s) URL"),
        ({"image_source": "http://x/a.raw"}, "no image_checksum"),
        ({"image_source": "http://x/a.raw", "image_checksum": "abc"}, "cannot tell the hash"),
        ({"image_source": "http://x/a.raw", "image_checksum": "e" * 32}, "md5 digest"),
    ],
)
def test_image_info_refuses_what_the_agent_could_not_verify(
    instance_info: dict[str, str], words: str
) -> None:
    with pytest.raises(StepFailed, match=re.escape(words)):
        image_info(instance_info, "n1")


def test_erasure_records_from_a_detailed_agent() -> None:
    result = [
        {
            "device": "/dev/sda",
            "serial": "S1",
            "method": "metadata",
            "result": "erased",
            "duration": 1.5,
        },
        "not a record",
    ]
    records = records_from_result(result, "erase_devices_metadata", "2026-11-22T08:00:00+00:00")
    assert records == [
        {
            "device": "/dev/sda",
            "serial": "S1",
            "method": "metadata",
            "result": "erased",
            "duration": 1.5,
            "step": "erase_devices_metadata",
            "finished_at": "2026-11-22T08:00:00+00:00",
        }
    ]
    assert describe(records[0]) == "/dev/sda (serial S1): metadata erased in 1.50s"


def test_erasure_records_from_ipas_stock_mapping() -> None:
    records = records_from_result({"/dev/sda": None, "/dev/sdb": False}, "erase_devices", "t")
    assert [(r["device"], r["result"], r["serial"], r["method"]) for r in records] == [
        ("/dev/sda", "erased", None, "erase_devices"),
        ("/dev/sdb", "failed", None, "erase_devices"),
    ]
    assert records_from_result(None, "erase_devices", "t") == []


def test_agent_steps_of_several_managers_merge_by_priority() -> None:
    reported = {
        "GenericHardwareManager": [
            {"step": "erase_devices", "priority": 10, "interface": "deploy"},
            {"step": "erase_devices_metadata", "priority": 99, "interface": "deploy"},
        ],
        "VendorManager": [{"step": "erase_devices", "priority": 50, "interface": "deploy"}],
    }
    merged = merge_agent_steps(reported)
    assert [(s["step"], s["priority"]) for s in merged] == [
        ("erase_devices_metadata", 99),
        ("erase_devices", 50),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        "erase",
        {"priority": 10},
        {"step": "a b", "priority": 10},
        {"step": "x", "interface": 7},
        {"step": "x", "priority": "abc"},
        {"step": "x", "priority": True},
        {"step": "x", "priority": -1},
        {"step": "x", "priority": 2**40},
        {"step": "x", "priority": 1.5},
        {"step": "x", "argsinfo": ["a"]},
        {"step": "x", "argsinfo": {"a": "text"}},
        {"step": "x", "argsinfo": {"a": {"required": "false"}}},
        {"step": "x", "abortable": "yes"},
        {"step": "x", "reboot_requested": 1},
    ],
)
def test_a_malformed_agent_step_is_left_out(bad: object) -> None:
    good = {"step": "ok", "priority": 5, "interface": "deploy", "argsinfo": {}}
    reported = {"Manager": [bad, good], "Broken": "not a list"}
    merged = merge_agent_steps(reported)
    assert [s["step"] for s in merged] == ["ok"]
    assert merged[0]["abortable"] is False
    assert merged[0]["reboot_requested"] is False


def test_command_errors_keep_ipas_details() -> None:
    result = CommandResult.parse(
        {
            "id": "1",
            "command_name": "execute_deploy_step",
            "command_status": "FAILED",
            "command_error": {"message": "Deploy step failed", "details": "checksum mismatch"},
            "command_result": None,
        }
    )
    assert result.error_message() == "Deploy step failed: checksum mismatch"


@pytest.mark.parametrize(
    ("progress", "retry_after"),
    [
        (NO_FLOW, -1),  # no agent on its way: nobody can tell when (seed 002)
        (FlowProgress(flow="clean", ramdisk_booting_since=1.0), AGENT_BOOT_RETRY),
    ],
)
def test_unknown_clean_steps_suggest_when_to_ask_again(
    progress: FlowProgress, retry_after: int
) -> None:
    node = Node(uuid="00000000-0000-0000-0000-000000000001", driver="redfish")
    node.driver_internal_info = {}
    with pytest.raises(StepsNotKnown) as raised:
        AgentDeploy().get_steps(ReadOnlyTask(node, progress=progress), "clean")
    assert raised.value.retry_after == retry_after


def test_service_steps_are_the_agents_own_report_not_its_clean_steps() -> None:
    node = Node(uuid="00000000-0000-0000-0000-000000000002", driver="redfish")
    node.driver_internal_info = {
        "agent_cached_clean_steps": [{"step": "erase_devices", "interface": "deploy"}]
    }
    task = ReadOnlyTask(node, progress=FlowProgress(flow="service", ramdisk_booting_since=1.0))
    with pytest.raises(StepsNotKnown) as raised:
        AgentDeploy().get_steps(task, "service")
    assert "service steps" in str(raised.value)
    assert raised.value.retry_after == AGENT_BOOT_RETRY
    node.driver_internal_info = {
        **node.driver_internal_info,
        "agent_cached_service_steps": [
            {"step": "burnin_disks", "interface": "deploy", "abortable": True},
            {"step": "delete_configuration", "interface": "raid"},
        ],
    }
    (step,) = AgentDeploy().get_steps(ReadOnlyTask(node, progress=NO_FLOW), "service")
    assert (step.kind, step.method, step.abortable, step.requires_ramdisk) == (
        "service",
        "burnin_disks",
        True,
        True,
    )


def test_the_agent_sees_no_secret_and_the_config_drive_only_for_a_deploy_step() -> None:
    drive = {"user_data": "#ignition"}
    node = Node(
        uuid="u",
        driver="fake-hardware",
        instance_info={"image_pull_secret": "user:pw", "configdrive": drive, "image_source": "x"},
        driver_internal_info={"agent_cached_deploy_steps": [], "agent_url": "http://a"},
    )
    task = ReadOnlyTask(node)
    plain = node_for_agent(task)
    assert plain["instance_info"] == {"image_pull_secret": "******", "image_source": "x"}
    assert plain["driver_internal_info"] == {"agent_url": "http://a"}
    with_drive = node_for_agent(task, with_configdrive=True)
    assert with_drive["instance_info"]["configdrive"] == drive
    assert with_drive["instance_info"]["image_pull_secret"] == "******"
