"""The whole flow on virtual nodes: the real CLI, the Redfish emulator, the real agent.

Two virtual nodes (a sushy-emulator system each, whose power-on boots the
real ironic-python-agent in namespaces on two loop disks) are enrolled with
the ``redfish`` hardware type and driven through the ``baremetal`` CLI, as
an operator would:

* manage; provide: automated cleaning by the agent wipes the disks (the bytes
  are checked) and leaves erasure records on the node;
* deploy an image served over HTTP: the agent verifies its checksum and the
  root disk holds it; the node then boots from disk;
* undeploy: cleaned again;
* a manual clean;
* the agent killed in the middle of a long clean step: the clean fails after
  the heartbeat timeout, naming the step and the last heartbeat;
* an image whose checksum does not match: the deploy fails with the agent's
  reason, and the node is not left waiting;
* the conductor replaced while an agent step runs: a new conductor (another
  name) goes on polling the same agent command, and cleaning completes;
* a conductor lost between the agent accepting a step and the step being
  recorded: its successor finds the agent busy with it and adopts it;
* in-band servicing of an active node: the agent boots, runs its service
  step, and the node boots its untouched instance again (with
  ``disable_power_off``, rebooted and never switched off);
* a custom deploy (``custom-agent``, as Metal3 asks for one): the requested
  step is one the agent reports only once it runs; it installs the instance
  from the config drive's user data. A step the agent does not have fails
  the deployment, naming what the agent offers.

The CLI is run without ``--wait`` (it polls every 10 s); the test polls.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from metalforge.startup import build_conductor
from metalforge.states import (
    ACTIVE,
    AVAILABLE,
    CLEAN_FAILED,
    CLEAN_WAIT,
    MANAGEABLE,
    SERVICE_FAILED,
)
from metalforge_lab.lab import INSTANCE, VirtualNode
from tests.support.api import LATEST, get_node
from tests.support.lab import (
    MIB,
    AgentLab,
    agent_lab,
    lab_config,
    nonzero_bytes,
    redfish_node_args,
)

pytestmark = pytest.mark.slow

INSTANCE_HEADER = b"METALFORGE-LAB-INSTANCE\n"
"""What the lab hardware manager's ``install_instance`` writes before the user data (its
module runs in the agent's virtualenv and cannot be imported here)."""

HEARTBEAT_TIMEOUT = 6
"""Seconds: the agent heartbeats every 1.8-3.6 s, and a dead one is noticed after 6."""


Environment = AgentLab


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    workdir = tmp_path_factory.mktemp("e2e")
    config = lab_config(workdir / "lab", "e", nodes=7)
    yield from agent_lab(workdir, config, agent_heartbeat_timeout=HEARTBEAT_TIMEOUT)


def _wait_state(env: Environment, name: str, wanted: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    node: dict[str, Any] = {}
    while time.monotonic() < deadline:
        node = get_node(env.stack.client, name)
        settled = node["target_provision_state"] is None or wanted == CLEAN_FAILED
        if node["provision_state"] == wanted and settled:
            return node
        failed = (CLEAN_FAILED, "deploy failed", SERVICE_FAILED)
        if node["provision_state"] in failed and wanted != CLEAN_FAILED:
            break
        time.sleep(0.2)
    raise AssertionError(
        f"{name} is {node.get('provision_state')} (wanted {wanted}); last_error: "
        f"{node.get('last_error')}; history: {_history(env, name)[-6:]}"
    )


def _history(env: Environment, name: str) -> list[str]:
    response = env.stack.client.get(f"/v1/nodes/{name}/history?detail=true", headers=LATEST)
    return [f"{e['severity']} {e['event']}" for e in response.json()["history"]]


def _enroll(env: Environment, vnode: VirtualNode) -> None:
    env.cli.run(*redfish_node_args(vnode))
    env.cli.run("port", "create", vnode.mac, "--node", vnode.name)
    env.cli.run("node", "manage", vnode.name)
    _wait_state(env, vnode.name, MANAGEABLE)


def _available(env: Environment, vnode: VirtualNode) -> None:
    """Enrolled, then cleaned by the agent into ``available``."""
    _enroll(env, vnode)
    env.cli.run("node", "provide", vnode.name)
    _wait_state(env, vnode.name, AVAILABLE)


def _fill_disks(vnode: VirtualNode) -> None:
    """Data and a partition table on every disk, so that erasing them shows."""
    for disk in vnode.disks:
        with disk.backing_file.open("r+b") as handle:
            handle.write(os.urandom(disk.backing_file.stat().st_size))
        subprocess.run(
            ["sgdisk", "-o", "-n", "1:2048:0", disk.device], check=True, capture_output=True
        )


def _whole_disk_image(path: Path) -> slice:
    """A 4 MiB whole-disk image: a GPT and one 2 MiB partition of random bytes.

    The agent refuses to finish writing an image without a partition table.
    Returns where the partition's bytes are.
    """
    path.write_bytes(bytes(4 * MIB))
    subprocess.run(["sgdisk", "-n", "1:2048:6143", str(path)], check=True, capture_output=True)
    with path.open("r+b") as handle:
        handle.seek(MIB)
        handle.write(os.urandom(2 * MIB))
    return slice(MIB, 3 * MIB)


def _set_image(
    env: Environment, vnode: VirtualNode, name: str, checksum: str | None = None
) -> None:
    """Point the node's instance at the served image ``name`` (its own sha256 unless
    ``checksum`` is given)."""
    if checksum is None:
        checksum = hashlib.sha256((env.image_dir / name).read_bytes()).hexdigest()
    env.cli.run(
        "node", "set", vnode.name,
        "--instance-info", f"image_source={env.images}/{name}",
        "--instance-info", f"image_checksum=sha256:{checksum}",
    )  # fmt: skip


def _records(env: Environment, name: str) -> list[dict[str, Any]]:
    shown = env.cli.json("node", "show", name, "--fields", "driver_internal_info")
    records: list[dict[str, Any]] = shown["driver_internal_info"].get("erasure_records", [])
    return records


def _start_burnin(env: Environment, vnode: VirtualNode, seconds: int) -> None:
    """A manual clean of one long agent step; returns once the agent runs it."""
    env.cli.run(
        "node", "clean", vnode.name, "--clean-steps",
        json.dumps([{"interface": "deploy", "step": "burnin_disks", "args": {"seconds": seconds}}]),
    )  # fmt: skip

    def burning() -> bool:
        node = get_node(env.stack.client, vnode.name)
        running: bool = node["provision_state"] == CLEAN_WAIT and (
            node["clean_step"].get("step") == "burnin_disks"
        )
        return running

    env.lab.wait_for(burning, 60, "the burn-in step running on the agent")


def _start_conductor(env: Environment, hostname: str) -> None:
    """Another conductor on the same database, after the running one stopped."""
    settings = env.stack.settings.model_copy(
        update={"conductor": env.stack.settings.conductor.model_copy(update={"hostname": hostname})}
    )
    conductor = build_conductor(settings, env.stack.db, env.stack.conductor.ctx.drivers)
    conductor.start()
    env.stack.conductor = conductor  # the fixture stops whichever conductor runs last


def test_clean_deploy_undeploy_and_manual_clean(env: Environment) -> None:  # noqa: PLR0915 - one linear clean, deploy, undeploy, clean scenario
    vnode = env.lab.nodes[0]
    _enroll(env, vnode)
    catalogue = env.stack.client.get(f"/v1/nodes/{vnode.name}/cleaning/steps", headers=LATEST)
    assert catalogue.status_code == 202, "no agent has reported its steps yet"
    assert catalogue.headers["Retry-Request-After"] == "-1", "no agent is on its way yet"

    # provide: automated cleaning by the agent, on disks full of data.
    _fill_disks(vnode)
    env.cli.run("node", "provide", vnode.name)
    node = _wait_state(env, vnode.name, AVAILABLE)
    assert node["power_state"] == "power off", "cleaning ends with the ramdisk powered off"
    for disk in vnode.disks:
        assert nonzero_bytes(disk.backing_file) == 0, f"{disk.device} was not erased"
    records = _records(env, vnode.name)
    assert {(r["device"], r["step"]) for r in records} == {
        (disk.device, step)
        for disk in vnode.disks
        for step in ("erase_devices_metadata", "erase_devices")
    }
    assert all(r["result"] == "erased" and r["serial"] for r in records), records
    assert {r["serial"] for r in records} == {disk.serial for disk in vnode.disks}
    assert sum("erasure" in line or "/dev/loop" in line for line in _history(env, vnode.name)) >= 4
    steps = env.stack.client.get(f"/v1/nodes/{vnode.name}/cleaning/steps", headers=LATEST)
    assert steps.status_code == 200
    names = {(s["interface"], s["step"]) for s in steps.json()["steps"]}
    assert {("deploy", "erase_devices"), ("deploy", "burnin_disks")} <= names

    # deploy an image the agent downloads from the bridge and verifies.
    image_file = env.image_dir / "disk.raw"
    partition = _whole_disk_image(image_file)
    image = image_file.read_bytes()
    _set_image(env, vnode, "disk.raw")
    env.cli.run("node", "deploy", vnode.name)
    node = _wait_state(env, vnode.name, ACTIVE)
    assert node["power_state"] == "power on"
    root = vnode.disks[0].backing_file
    with root.open("rb") as handle:
        handle.seek(partition.start)
        written = handle.read(partition.stop - partition.start)
    # The agent moves the image's backup GPT to the end of the bigger disk, which
    # rewrites the GPT headers; the partition's bytes must be exactly the image's.
    assert written == image[partition], "the root disk does not hold the image"
    env.lab.wait_for(lambda: vnode.status == INSTANCE, 30, "the node booting its instance")
    history = _history(env, vnode.name)
    assert any("the agent powered the node off" in line for line in history), history[-12:]
    assert vnode.boot_device == "Hdd"

    # undeploy: the agent cleans again.
    env.cli.run("node", "undeploy", vnode.name)
    _wait_state(env, vnode.name, AVAILABLE)
    assert nonzero_bytes(root) == 0, "the deployed image survived cleaning"

    # a manual clean of the metadata only.
    env.cli.run("node", "manage", vnode.name)
    _wait_state(env, vnode.name, MANAGEABLE)
    _fill_disks(vnode)
    env.cli.run(
        "node", "clean", vnode.name, "--clean-steps",
        json.dumps([{"interface": "deploy", "step": "erase_devices_metadata"}]),
    )  # fmt: skip
    _wait_state(env, vnode.name, MANAGEABLE)
    records = _records(env, vnode.name)
    assert {r["step"] for r in records} == {"erase_devices_metadata"}
    for disk in vnode.disks:
        with disk.backing_file.open("rb") as handle:
            assert handle.read(34 * 512).count(0) == 34 * 512, "the GPT is still there"
        assert nonzero_bytes(disk.backing_file) > 0, "a metadata erase keeps the data"


def test_agent_killed_mid_clean_fails_after_the_heartbeat_timeout(env: Environment) -> None:
    vnode = env.lab.nodes[1]
    _enroll(env, vnode)
    _start_burnin(env, vnode, seconds=120)
    time.sleep(1)
    assert vnode.agent is not None
    pid = vnode.agent.agent_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    # A condition wait, not a timing assertion: the clean-failed state must come
    # from the heartbeat timeout, well before the 120 s burn-in would end.
    node = _wait_state(env, vnode.name, CLEAN_FAILED, timeout=HEARTBEAT_TIMEOUT + 60)
    error = node["last_error"]
    assert "deploy.burnin_disks" in error, error
    assert "no heartbeat from the ramdisk agent" in error, error
    assert "last heartbeat at" in error, error
    assert node["maintenance"] is True
    assert node["clean_step"] == {}


def _deploy_fails(
    env: Environment, vnode: VirtualNode, never_active: str, timeout: float
) -> dict[str, Any]:
    """The node once its deployment failed; it must not become ``active`` meanwhile."""
    deadline = time.monotonic() + timeout
    node = get_node(env.stack.client, vnode.name)
    while node["provision_state"] != "deploy failed" and time.monotonic() < deadline:
        assert node["provision_state"] != ACTIVE, never_active
        time.sleep(0.2)
        node = get_node(env.stack.client, vnode.name)
    assert node["provision_state"] == "deploy failed", node
    return node


def test_image_with_a_wrong_checksum_fails_the_deploy_with_the_agents_reason(
    env: Environment,
) -> None:
    vnode = env.lab.nodes[2]
    _available(env, vnode)
    _whole_disk_image(env.image_dir / "tampered.raw")
    _set_image(env, vnode, "tampered.raw", checksum="0" * 64)
    env.cli.run("node", "deploy", vnode.name)
    node = _deploy_fails(env, vnode, "a tampered image was deployed", timeout=60)
    error = node["last_error"]
    assert "deploy.write_image" in error, error
    assert "checksum" in error.lower(), error


def test_another_conductor_finishes_an_agent_step_the_first_one_left(env: Environment) -> None:
    vnode = env.lab.nodes[3]
    _enroll(env, vnode)
    _start_burnin(env, vnode, seconds=6)
    starts_before = vnode.agent_starts
    env.stack.conductor.stop()
    _start_conductor(env, "replacement-conductor")
    node = _wait_state(env, vnode.name, MANAGEABLE, timeout=60)
    assert node["last_error"] is None
    assert vnode.agent_starts == starts_before, "the new conductor did not reboot the ramdisk"
    history = env.stack.client.get(
        f"/v1/nodes/{vnode.name}/history?detail=true", headers=LATEST
    ).json()["history"]
    finished = [e for e in history if "burnin_disks finished" in e["event"]]
    assert finished, [e["event"] for e in history][-8:]
    assert finished[-1]["conductor"] == "replacement-conductor"
    started = [e for e in history if "burnin_disks started" in e["event"]]
    assert len(started) == 1, "the step ran once: the new conductor polled the running command"


def test_a_step_the_agent_accepted_but_nobody_recorded_is_adopted(env: Environment) -> None:
    """The crash window between ``execute_clean_step`` being accepted and the wait being saved."""
    vnode = env.lab.nodes[4]
    _enroll(env, vnode)
    _start_burnin(env, vnode, seconds=6)
    env.stack.conductor.stop()
    # What the database holds when the conductor died just after the agent accepted
    # the step: the node still cleaning, the step's index saved, no command recorded.
    with env.stack.db.write() as session:
        row = session.execute(
            text("SELECT id, driver_internal_info FROM nodes WHERE name = :n"),
            {"n": vnode.name},
        ).one()
        info = row.driver_internal_info
        info = json.loads(info) if isinstance(info, str) else dict(info)
        info.pop("agent_command")
        session.execute(
            text(
                "UPDATE nodes SET provision_state = 'cleaning', driver_internal_info = :i, "
                "reservation = NULL WHERE id = :id"
            ),
            {"i": json.dumps(info), "id": row.id},
        )
    _start_conductor(env, "successor-conductor")
    node = _wait_state(env, vnode.name, MANAGEABLE, timeout=60)
    assert node["last_error"] is None
    events = [
        e["event"]
        for e in env.stack.client.get(f"/v1/nodes/{vnode.name}/history", headers=LATEST).json()[
            "history"
        ]
    ]
    assert sum("burnin_disks started" in e for e in events) == 2, "started again after the loss"
    assert sum("burnin_disks finished" in e for e in events) == 1
    log = vnode.agent.log_path.read_text() if vnode.agent is not None else ""
    assert log.count("Asynchronous command execute_clean_step started") == 1, (
        "the agent ran the step once: the successor adopted it"
    )


def _root_partition(vnode: VirtualNode, partition: slice) -> bytes:
    with vnode.disks[0].backing_file.open("rb") as handle:
        handle.seek(partition.start)
        return handle.read(partition.stop - partition.start)


def _service_burnin(env: Environment, vnode: VirtualNode) -> dict[str, Any]:
    """Service ``vnode`` with the agent's read-only burn-in; returns the node once active."""
    step = {"interface": "deploy", "step": "burnin_disks", "args": {"seconds": 1}}
    env.cli.run("node", "service", vnode.name, "--service-steps", json.dumps([step]))
    return _wait_state(env, vnode.name, ACTIVE, timeout=120)


def test_an_active_node_is_serviced_by_the_agent_and_boots_its_instance_again(
    env: Environment,
) -> None:
    vnode = env.lab.nodes[5]
    _available(env, vnode)
    image_file = env.image_dir / "serviced.raw"
    partition = _whole_disk_image(image_file)
    image = image_file.read_bytes()
    _set_image(env, vnode, "serviced.raw")
    env.cli.run("node", "deploy", vnode.name)
    _wait_state(env, vnode.name, ACTIVE)
    env.lab.wait_for(lambda: vnode.status == INSTANCE, 30, "the node booting its instance")
    steps_url = f"/v1/nodes/{vnode.name}/servicing/steps"
    unknown = env.stack.client.get(steps_url, headers=LATEST)
    assert unknown.status_code == 202, "no agent has reported service steps yet"

    agent_starts, instance_boots = vnode.agent_starts, vnode.instance_boots
    node = _service_burnin(env, vnode)
    assert node["last_error"] is None
    assert node["service_step"] == {}
    assert node["power_state"] == "power on"
    assert vnode.agent_starts == agent_starts + 1, "servicing booted the agent once"
    env.lab.wait_for(
        lambda: vnode.status == INSTANCE and vnode.instance_boots == instance_boots + 1,
        30,
        "the node booting its instance again",
    )
    assert vnode.boot_device == "Hdd"
    assert _root_partition(vnode, partition) == image[partition], "servicing touched the disk"
    history = _history(env, vnode.name)
    assert any("deploy.burnin_disks finished" in line for line in history), history[-12:]
    catalogue = env.stack.client.get(steps_url, headers=LATEST)
    assert catalogue.status_code == 200
    assert ("deploy", "burnin_disks") in {
        (s["interface"], s["step"]) for s in catalogue.json()["steps"]
    }

    # disable_power_off: into the ramdisk and back by reboots, never switched off.
    patch = [{"op": "replace", "path": "/disable_power_off", "value": True}]
    answer = env.stack.client.patch(f"/v1/nodes/{vnode.name}", json=patch, headers=LATEST)
    assert answer.status_code == 200, answer.text
    resets_before = len(vnode.resets)
    agent_starts = vnode.agent_starts
    node = _service_burnin(env, vnode)
    assert node["last_error"] is None
    assert vnode.agent_starts == agent_starts + 1
    env.lab.wait_for(lambda: vnode.status == INSTANCE, 30, "the node booting its instance again")
    resets = vnode.resets[resets_before:]
    assert resets == ["ForceRestart", "ForceRestart"], resets
    assert _root_partition(vnode, partition) == image[partition]


def _custom_deploy(env: Environment, vnode: VirtualNode, step: str) -> None:
    """Metal3's custom deploy request: one agent step at priority 80, a JSON config drive."""
    body = {
        "target": "active",
        "deploy_steps": [{"interface": "deploy", "step": step, "args": {}, "priority": 80}],
        "configdrive": {"meta_data": {"uuid": vnode.name}, "user_data": f"hello {vnode.name}"},
    }
    answer = env.stack.client.put(
        f"/v1/nodes/{vnode.name}/states/provision", json=body, headers=LATEST
    )
    assert answer.status_code == 202, answer.text


def test_a_custom_deploy_runs_the_agents_own_step_with_the_config_drive(env: Environment) -> None:
    vnode = env.lab.nodes[6]
    _available(env, vnode)
    env.cli.run("node", "set", vnode.name, "--deploy-interface", "custom-agent")

    _custom_deploy(env, vnode, "install_instance")
    node = _wait_state(env, vnode.name, ACTIVE, timeout=120)
    assert node["last_error"] is None
    payload = INSTANCE_HEADER + f"hello {vnode.name}".encode()
    with vnode.disks[0].backing_file.open("rb") as handle:
        assert handle.read(len(payload)) == payload, "the agent's step did not install"
    env.lab.wait_for(lambda: vnode.status == INSTANCE, 30, "the node booting its instance")
    history = _history(env, vnode.name)
    waited = [line for line in history if "waiting for the ramdisk agent's deploy steps" in line]
    assert waited, history
    assert "deploy.install_instance(80) from deploy_steps" in waited[-1], waited
    assert any(
        "plan completed with the ramdisk agent's steps: deploy.install_instance(80)" in line
        for line in history
    ), history[-12:]
    assert any("deploy.install_instance finished" in line for line in history), history[-12:]
    assert not any("write_image" in line and "started" in line for line in history)

    env.cli.run("node", "undeploy", vnode.name)
    _wait_state(env, vnode.name, AVAILABLE, timeout=120)
    _custom_deploy(env, vnode, "install_nothing")
    node = _deploy_fails(env, vnode, "a step the agent lacks was skipped", timeout=120)
    error = node["last_error"]
    assert "does not support the deploy step deploy.install_nothing" in error, error
    assert "the ramdisk agent offers: " in error, error
    assert "deploy.install_instance" in error, error
