"""Fast track on virtual nodes running the real ironic-python-agent: one boot of the agent.

Each virtual node is a sushy-emulator system whose power-on boots the real
agent in namespaces on two loop disks (the lab counts the agent's starts).
With ``driver_info/fast_track`` a node taken through inspect, provide and
deploy boots the agent once: the inspection's agent looks itself up after
its report and is kept, the cleaning and the deployment use it. History and
``/metrics`` say so, and the lab's own count of agent starts proves it. A
kept agent nobody uses is powered off after ``fast_track_timeout``; one that
died is replaced by a fresh boot, never waited on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.states import ACTIVE, AVAILABLE, MANAGEABLE
from metalforge_lab import demo
from metalforge_lab.lab import INSTANCE, OFF, VirtualNode
from tests.support.api import LATEST, get_node
from tests.support.lab import (
    MIB,
    AgentLab,
    agent_lab,
    lab_config,
    redfish_node_args,
)

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 6
"""Seconds: the agent heartbeats every 1.8-3.6 s; one silent for 6 s is taken for dead."""


Environment = AgentLab


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    workdir = tmp_path_factory.mktemp("fast-track")
    config = lab_config(workdir / "lab", "f", nodes=3)
    config = dataclasses.replace(
        config,
        extra_kernel_params=(
            *config.extra_kernel_params,
            *demo.inspection_kernel_params(config.api_url),
        ),
    )
    yield from agent_lab(workdir, config, agent_heartbeat_timeout=HEARTBEAT_TIMEOUT)


def _wait_state(env: Environment, name: str, wanted: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    node: dict[str, Any] = {}
    while time.monotonic() < deadline:
        node = get_node(env.stack.client, name)
        if node["provision_state"] == wanted and node["target_provision_state"] is None:
            return node
        if "failed" in node["provision_state"]:
            break
        time.sleep(0.2)
    raise AssertionError(
        f"{name} is {node.get('provision_state')} (wanted {wanted}); last_error: "
        f"{node.get('last_error')}; history: {_history(env, name)[-8:]}"
    )


def _wait_for(
    env: Environment, name: str, condition: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        node = get_node(env.stack.client, name)
        if condition(node) or time.monotonic() > deadline:
            assert condition(node), node
            return node
        time.sleep(0.2)


def _history(env: Environment, name: str) -> list[str]:
    response = env.stack.client.get(f"/v1/nodes/{name}/history?detail=true", headers=LATEST)
    return [entry["event"] for entry in response.json()["history"]]


def _enroll_and_inspect(env: Environment, vnode: VirtualNode) -> None:
    env.cli.run(
        *redfish_node_args(vnode),
        "--inspect-interface", "agent",
        "--driver-info", "fast_track=true",
    )  # fmt: skip
    env.cli.run("port", "create", vnode.mac, "--node", vnode.name)
    env.cli.run("node", "manage", vnode.name)
    _wait_state(env, vnode.name, MANAGEABLE)
    env.cli.run("node", "inspect", vnode.name)
    _wait_state(env, vnode.name, MANAGEABLE, timeout=240)


def _whole_disk_image(path: Path) -> None:
    """A 4 MiB whole-disk image with a GPT and one partition (the agent wants a table)."""
    path.write_bytes(bytes(4 * MIB))
    subprocess.run(["sgdisk", "-n", "1:2048:6143", str(path)], check=True, capture_output=True)


def _metric(env: Environment, name: str, **labels: str) -> float:
    text = env.stack.client.get("/metrics").text
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and ",".join(sorted(match.group(1).split(","))) == wanted:
            return float(match.group(2))
    return 0.0


def _wait_metric(env: Environment, name: str, value: float, **labels: str) -> None:
    deadline = time.monotonic() + 30
    while _metric(env, name, **labels) < value:
        assert time.monotonic() < deadline, f"{name}{labels} never reached {value}"
        time.sleep(0.5)


def test_inspect_provide_and_deploy_boot_the_agent_once(env: Environment) -> None:
    vnode = env.lab.nodes[0]
    _enroll_and_inspect(env, vnode)
    node = get_node(env.stack.client, vnode.name)
    assert node["power_state"] == "power on", "the inspection's agent is kept running"
    assert vnode.status != OFF
    starts = vnode.agent_starts
    assert starts >= 1

    env.cli.run("node", "provide", vnode.name)
    node = _wait_state(env, vnode.name, AVAILABLE)
    assert node["power_state"] == "power on", "the cleaning's agent is kept running"

    image = env.image_dir / "disk.raw"
    _whole_disk_image(image)
    checksum = hashlib.sha256(image.read_bytes()).hexdigest()
    env.cli.run(
        "node", "set", vnode.name,
        "--instance-info", f"image_source={env.images}/disk.raw",
        "--instance-info", f"image_checksum=sha256:{checksum}",
    )  # fmt: skip
    env.cli.run("node", "deploy", vnode.name)
    node = _wait_state(env, vnode.name, ACTIVE)
    env.lab.wait_for(lambda: vnode.status == INSTANCE, 30, "the node booting its instance")

    assert vnode.agent_starts == starts, "cleaning and deployment started no new agent"
    history = _history(env, vnode.name)
    boots = [line for line in history if line.startswith("booting the ramdisk agent")]
    assert boots == ["booting the ramdisk agent for inspection"], boots
    assert "using the agent kept running for cleaning (fast track): no reboot" in history
    assert "using the agent kept running for deployment (fast track): no reboot" in history
    _wait_metric(env, "metalforge_agent_boots_total", 1, flow="inspect", how="booted")
    _wait_metric(env, "metalforge_agent_boots_total", 1, flow="clean", how="kept")
    _wait_metric(env, "metalforge_agent_boots_total", 1, flow="deploy", how="kept")
    assert _metric(env, "metalforge_agent_boots_total", flow="clean", how="booted") == 0
    assert _metric(env, "metalforge_agent_boots_total", flow="deploy", how="booted") == 0
    # Cleaning switched no power at all; deploying powered the instance on (the agent
    # powered itself off).
    assert _metric(env, "metalforge_power_actions_total", flow="clean", target="rebooting") == 0
    assert _metric(env, "metalforge_power_actions_total", flow="clean", target="power on") == 0
    _wait_metric(env, "metalforge_power_actions_total", 1, flow="deploy", target="power on")


def test_a_kept_agent_nobody_uses_is_powered_off(env: Environment) -> None:
    vnode = env.lab.nodes[1]
    settings = env.stack.settings.conductor
    settings.fast_track_timeout = 3.0
    try:
        _enroll_and_inspect(env, vnode)
    finally:
        settings.fast_track_timeout = 300.0

    env.lab.wait_for(lambda: vnode.status == OFF, 60, "the idle kept agent powered off")
    node = _wait_for(env, vnode.name, lambda n: n["power_state"] == "power off")
    assert node["provision_state"] == MANAGEABLE
    assert "agent_url" not in node["driver_internal_info"]
    assert any("the kept agent was unused for" in line for line in _history(env, vnode.name))
    lookup = env.stack.client.get(
        f"/v1/lookup?node_uuid={node['uuid']}", headers={"X-OpenStack-Ironic-API-Version": "1.68"}
    )
    assert lookup.status_code == 404, "an ended agent's node is not looked up any more"


def test_a_kept_agent_that_died_is_replaced_by_a_fresh_boot(env: Environment) -> None:
    vnode = env.lab.nodes[2]
    _enroll_and_inspect(env, vnode)
    # A value that is neither true nor false is refused by validation, and kept nothing.
    env.cli.run("node", "set", vnode.name, "--driver-info", "fast_track=maybe")
    checked = env.stack.client.get(f"/v1/nodes/{vnode.name}/validate", headers=LATEST).json()
    assert checked["deploy"]["result"] is False
    assert "fast_track must be true or false" in checked["deploy"]["reason"]
    env.cli.run("node", "set", vnode.name, "--driver-info", "fast_track=true")
    assert vnode.agent is not None
    starts = vnode.agent_starts
    pid = vnode.agent.agent_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    env.cli.run("node", "provide", vnode.name)
    node = _wait_state(env, vnode.name, AVAILABLE)
    assert node["last_error"] is None
    assert vnode.agent_starts == starts + 1, "one fresh agent replaced the dead one"
    history = _history(env, vnode.name)
    assert "booting the ramdisk agent for cleaning" in history, history[-10:]
