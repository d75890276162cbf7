"""Virtual nodes: Redfish power drives the real ironic-python-agent in namespaces.

One lab (three nodes) and one metalforge serving its agents' endpoint on the
lab's bridge are shared by the module; each test uses its own node. The
agent's protocol is checked from both ends: metalforge records the agent's
lookup and heartbeat, and the test calls the agent's command API with the
token and certificate metalforge received, to run the lab hardware manager's
real steps on the node's loop disks.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import text

from metalforge.db import agent_sessions
from metalforge.states import CLEAN_WAIT
from metalforge_lab import loopdev, namespaces
from metalforge_lab.lab import AGENT, INSTANCE, NO_BOOT_DEVICE, OFF, Lab, VirtualNode
from metalforge_lab.ports import free_port
from tests.support.api import LATEST, create_node
from tests.support.lab import (
    MIB,
    image_server,
    lab_config,
    nonzero_bytes,
    partition_table,
    require_lab,
)
from tests.support.stack import LiveServer, Stack, start_stack, test_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    require_lab()


@dataclass
class Environment:
    lab: Lab
    stack: Stack
    server: LiveServer


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    workdir = tmp_path_factory.mktemp("lab")
    config = lab_config(workdir / "lab", "t", nodes=3)
    lab = Lab(config)
    lab.start()
    agent_port = int(config.api_url.rsplit(":", 1)[1])
    try:
        settings = test_settings(f"sqlite:///{workdir}/metalforge.sqlite")
        settings.api.port = free_port()
        settings.api.agent_host = lab.bridge.address
        settings.api.agent_port = agent_port
        stack = start_stack(settings, start_conductor=False)
        server = LiveServer(stack)
        server.start()
        try:
            yield Environment(lab, stack, server)
        finally:
            server.stop()
            stack.stop()
    finally:
        lab.stop()


# -- Redfish, as any client would call it -----------------------------------
def _redfish(method: str, node: VirtualNode, path: str = "", body: Any = None) -> int:
    url = f"{node.redfish_address}{node.redfish_system_id}{path}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        status: int = answer.status
        return status


def _set_boot(node: VirtualNode, target: str) -> None:
    assert _redfish("PATCH", node, body={"Boot": {"BootSourceOverrideTarget": target}}) == 204


def _reset(node: VirtualNode, reset_type: str) -> None:
    assert _redfish("POST", node, "/Actions/ComputerSystem.Reset", {"ResetType": reset_type}) == 204


def _enrol_in_clean_wait(stack: Stack, node: VirtualNode) -> str:
    """A metalforge node with the virtual node's MAC, waiting for its cleaning ramdisk."""
    created = create_node(stack.client, name=node.name)
    response = stack.client.post(
        "/v1/ports", json={"node_uuid": created["uuid"], "address": node.mac}, headers=LATEST
    )
    assert response.status_code == 201, response.text
    with stack.db.write() as session:
        session.execute(
            text("UPDATE nodes SET provision_state = :s WHERE uuid = :u"),
            {"s": CLEAN_WAIT, "u": created["uuid"]},
        )
        # What a conductor does before it powers the node on into the ramdisk:
        # only then does a lookup hand the agent its token.
        node_id = session.execute(
            text("SELECT id FROM nodes WHERE uuid = :u"), {"u": created["uuid"]}
        ).scalar_one()
        agent_sessions.begin(session, node_id)
    return str(created["uuid"])


def _agent_session(stack: Stack) -> dict[str, Any] | None:
    with stack.db.read() as session:
        row = session.execute(
            text("SELECT token, agent_url, agent_version, verify_ca FROM agent_sessions")
        ).first()
    return dict(row._mapping) if row is not None and row.agent_url else None


# -- the agent's command API ------------------------------------------------
class AgentClient:
    """What metalforge's deploy interface does with the agent, done by hand."""

    def __init__(self, url: str, token: str, ca_file: Path) -> None:
        self.url = url
        self.token = token
        self.ca_file = ca_file

    def command(self, name: str, params: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        """Run one command and wait for its end (the agent runs one at a time)."""
        # verify= per request: REQUESTS_CA_BUNDLE would override a session-level one.
        posted = requests.post(
            f"{self.url}/v1/commands/",
            params={"agent_token": self.token, "wait": "false"},
            json={"name": name, "params": params},
            verify=str(self.ca_file),
            timeout=30,
        )
        assert posted.status_code == 200, posted.text
        result: dict[str, Any] = posted.json()
        deadline = time.monotonic() + timeout
        while result["command_status"] == "RUNNING":
            assert time.monotonic() < deadline, f"{name} still running after {timeout} s"
            time.sleep(0.2)
            polled = requests.get(
                f"{self.url}/v1/commands/{result['id']}",
                params={"agent_token": self.token},
                verify=str(self.ca_file),
                timeout=30,
            )
            assert polled.status_code == 200, polled.text
            result = polled.json()
        return result


def _wait(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout} s")


# -- tests --------------------------------------------------------------------
def test_pxe_power_on_boots_the_agent_which_looks_up_heartbeats_and_runs_steps(  # noqa: PLR0915 - one linear boot, heartbeat and steps scenario
    env: Environment, tmp_path: Path
) -> None:
    node = env.lab.nodes[0]
    node_uuid = _enrol_in_clean_wait(env.stack, node)
    _set_boot(node, "Pxe")
    _reset(node, "On")
    env.lab.wait_for(lambda: node.status == AGENT, 10, "agent start")

    agent = _wait(lambda: _agent_session(env.stack), 60, "the agent's heartbeat")
    assert agent["agent_url"] == f"https://{node.address}:9999"
    assert agent["agent_version"] == "13.0.0"
    assert agent["verify_ca"].startswith("-----BEGIN CERTIFICATE-----")
    assert node.agent is not None
    log = node.agent.log_path.read_text()
    assert f"addresses={node.mac.replace(':', '%3A')}" in log or node.mac in log

    ca_file = tmp_path / "agent-ca.pem"
    ca_file.write_text(agent["verify_ca"])
    client = AgentClient(agent["agent_url"], agent["token"], ca_file)
    node_body = {"uuid": node_uuid, "driver_internal_info": {}, "properties": {}}

    steps = client.command("clean.get_clean_steps", {"node": node_body, "ports": []})
    assert steps["command_status"] == "SUCCEEDED", steps
    manager_steps = steps["command_result"]["clean_steps"]["MetalforgeLabHardwareManager"]
    assert [(s["step"], s["priority"], s["abortable"]) for s in manager_steps] == [
        ("erase_devices_metadata", 99, True),
        ("erase_devices", 10, True),
        ("burnin_disks", 0, True),
    ]
    version = steps["command_result"]["hardware_manager_version"]
    assert version == {"MetalforgeLabHardwareManager": "1.0"}

    # Give both disks a partition table and data, from the host side.
    for disk in node.disks:
        subprocess.run(["sgdisk", "-n", "1:0:0", disk.device], check=True, capture_output=True)
        with disk.backing_file.open("r+b") as handle:
            handle.seek(10 * MIB)
            handle.write(b"\xa5" * MIB)
        assert partition_table(disk.device) == "gpt"

    def clean(step: str) -> dict[str, Any]:
        done = client.command(
            "clean.execute_clean_step",
            {
                "step": {"step": step, "interface": "deploy", "priority": 1, "args": {}},
                "node": node_body,
                "ports": [],
                "clean_version": version,
            },
        )
        assert done["command_status"] == "SUCCEEDED", done
        return done

    erased = clean("erase_devices_metadata")
    records = erased["command_result"]["clean_result"]
    assert [(r["device"], r["serial"], r["method"], r["result"]) for r in records] == [
        (d.device, d.backing_file.name, "metadata", "erased") for d in node.disks
    ]
    assert all(isinstance(r["duration"], float) for r in records)
    assert erased["command_result"]["clean_step"]["step"] == "erase_devices_metadata"
    for disk in node.disks:
        assert partition_table(disk.device) == ""
        assert nonzero_bytes(disk.backing_file) > 0, "metadata erasure leaves the data"

    zeroed = clean("erase_devices")["command_result"]["clean_result"]
    assert [(r["device"], r["method"], r["result"]) for r in zeroed] == [
        (d.device, "zero-overwrite", "erased") for d in node.disks
    ]
    for disk in node.disks:
        assert nonzero_bytes(disk.backing_file) == 0

    deploy_steps = client.command("deploy.get_deploy_steps", {"node": node_body, "ports": []})
    listed = deploy_steps["command_result"]["deploy_steps"]["MetalforgeLabHardwareManager"]
    # Priority 0, as the agent's generic manager offers it (``direct`` declares its own).
    assert ("write_image", 0) in [(s["step"], s["priority"]) for s in listed]

    # A whole-disk raw image with a GPT, streamed onto the root disk and checked by the agent.
    image = tmp_path / "images" / "disk.raw"
    image.parent.mkdir()
    with image.open("wb") as new:
        new.truncate(4 * MIB)
    subprocess.run(["sgdisk", "-n", "1:0:0", str(image)], check=True, capture_output=True)
    with image.open("r+b") as handle:
        handle.seek(2 * MIB)
        handle.write(os.urandom(MIB))
    content = image.read_bytes()

    def write_image(checksum: str) -> dict[str, Any]:
        image_info = {
            "id": "lab-image",
            "urls": [f"{base}/disk.raw"],
            "disk_format": "raw",
            "stream_raw_images": True,
            "os_hash_algo": "sha256",
            "os_hash_value": checksum,
        }
        step = {"step": "write_image", "interface": "deploy", "priority": 80}
        return client.command(
            "deploy.execute_deploy_step",
            {
                "step": {**step, "args": {"image_info": image_info, "configdrive": None}},
                "node": node_body,
                "ports": [],
                "deploy_version": version,
            },
        )

    with image_server(image.parent, env.lab.bridge.address) as base:
        refused = write_image("0" * 64)
        assert refused["command_status"] == "FAILED"
        assert "ImageChecksumError" in json.dumps(refused["command_error"])
        written = write_image(hashlib.sha256(content).hexdigest())
    assert written["command_status"] == "SUCCEEDED", written
    assert "written to device" in written["command_result"]["deploy_result"]["result"]
    # The agent moves the image's backup GPT to the end of the bigger disk, so the
    # partition table differs from the image's; the data is the image's.
    with node.disks[0].backing_file.open("rb") as root:
        root.seek(2 * MIB)
        assert root.read(MIB) == content[2 * MIB : 3 * MIB]
    assert partition_table(node.disks[0].device) == "gpt"
    assert nonzero_bytes(node.disks[1].backing_file) == 0, "only the root disk is written"


def test_power_off_and_restart_kill_the_agent_and_keep_the_node(env: Environment) -> None:
    node = env.lab.nodes[2]
    assert node.agent is not None
    _set_boot(node, "Pxe")
    _reset(node, "On")
    first = _wait(node.agent.agent_pid, 10, "agent fork")
    assert first in node.network.processes()

    _reset(node, "ForceRestart")
    env.lab.wait_for(lambda: node.agent_starts == 2 and node.status == AGENT, 10, "restart")
    second = _wait(node.agent.agent_pid, 10, "agent fork after restart")
    assert second != first
    assert not Path(f"/proc/{first}").exists(), "a restart kills the old agent"

    _reset(node, "ForceOff")
    env.lab.wait_for(lambda: node.status == OFF, 10, "power-off")
    assert not node.agent.running
    assert not Path(f"/proc/{second}").exists()
    assert node.network.processes() == []
    # Only the agent is gone: the node's network and disks are there for its next boot.
    assert node.network.namespace in namespaces.namespaces()
    assert namespaces.exists(env.lab.bridge.name)
    for disk in node.disks:
        assert loopdev.attached_to(disk.backing_file) == [disk.device]


def test_disk_boot_starts_no_agent(env: Environment) -> None:
    node = env.lab.nodes[1]
    _set_boot(node, "Hdd")
    _reset(node, "On")
    env.lab.wait_for(lambda: node.status == INSTANCE, 10, "boot from disk")
    assert node.instance_boots == 1
    assert node.agent_starts == 0
    time.sleep(0.5)
    assert node.agent is not None
    assert not node.agent.running
    assert node.network.processes() == []
    state = json.loads((env.lab.state_dir / "lab.json").read_text())
    assert state["nodes"][1]["status"] == INSTANCE
    _reset(node, "ForceOff")
    env.lab.wait_for(lambda: node.status == OFF, 10, "power-off")


def test_virtual_media_boot_starts_the_agent_only_with_media(
    env: Environment, tmp_path: Path
) -> None:
    node = env.lab.nodes[1]
    assert node.agent is not None
    _set_boot(node, "Cd")
    _reset(node, "On")
    env.lab.wait_for(lambda: node.status == NO_BOOT_DEVICE, 10, "boot without media")
    assert not node.agent.running

    (tmp_path / "ramdisk.iso").write_bytes(b"lab ramdisk")
    with image_server(tmp_path, "127.0.0.1") as base:
        inserted = _redfish(
            "POST",
            node,
            "/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia",
            {"Image": f"{base}/ramdisk.iso", "Inserted": True, "WriteProtected": True},
        )
    assert inserted == 204
    starts = node.agent_starts
    _reset(node, "ForceRestart")
    env.lab.wait_for(lambda: node.agent_starts == starts + 1, 10, "boot from virtual media")
    assert node.status == AGENT
    _wait(node.agent.agent_pid, 10, "agent fork")
    _reset(node, "ForceOff")
    env.lab.wait_for(lambda: node.status == OFF, 10, "power-off")
    assert node.network.processes() == []


def test_teardown_leaves_nothing_behind(tmp_path: Path) -> None:
    lab = Lab(lab_config(tmp_path / "lab", "d", nodes=1))
    with lab:
        node = lab.nodes[0]
        assert node.agent is not None
        _set_boot(node, "Pxe")
        _reset(node, "On")
        agent_pid = _wait(node.agent.agent_pid, 10, "agent fork")
        emulator = lab.emulator
        assert emulator is not None
        assert emulator.process is not None
        emulator_pid = emulator.process.pid
    assert node.network.namespace not in namespaces.namespaces()
    assert not namespaces.exists(node.network.host_veth)
    assert not namespaces.exists(lab.bridge.name)
    for disk in node.disks:
        assert not disk.backing_file.exists()
        listed = subprocess.run(["losetup", "-l", "-n", "-O", "BACK-FILE"], capture_output=True)
        assert str(disk.backing_file).encode() not in listed.stdout
    assert not Path(f"/proc/{agent_pid}").exists()
    assert not Path(f"/proc/{emulator_pid}").exists()
    assert json.loads((lab.state_dir / "lab.json").read_text())["running"] is False
