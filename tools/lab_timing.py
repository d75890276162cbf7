"""Where a provide, a deploy and an undeploy spend their time on the lab's virtual nodes.

One virtual node (a sushy-emulator system whose power-on boots the real
ironic-python-agent in namespaces on loop disks) is taken through inspect,
provide, deploy and undeploy by an in-process metalforge, once without and
once with fast track. For each flow it prints the time from the request to
the stable state and the node's history entries with their offsets, so the
waits between them show. Needs root and the agent's virtualenv (``make
.ipa-venv/.installed-stamp system-packages``); run as
``PYTHONPATH=src:. python tools/lab_timing.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.api import LATEST, get_node
from tests.support.lab import MIB, AgentLab, agent_lab, lab_config

from metalforge_lab import demo
from metalforge_lab.lab import VirtualNode

HEARTBEAT_TIMEOUT = 6
FLOWS = (
    ("inspect", "inspect", "manageable"),
    ("provide", "provide", "available"),
    ("deploy", "active", "active"),
    ("undeploy", "deleted", "available"),
)


def _wait(env: AgentLab, name: str, wanted: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = get_node(env.stack.client, name)
        if node["provision_state"] == wanted and node["target_provision_state"] is None:
            return
        if "failed" in node["provision_state"]:
            raise RuntimeError(f"{name}: {node['provision_state']}: {node['last_error']}")
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not reach {wanted} within {timeout} s")


def _history(env: AgentLab, name: str) -> list[dict[str, Any]]:
    response = env.stack.client.get(f"/v1/nodes/{name}/history?detail=true", headers=LATEST)
    entries: list[dict[str, Any]] = response.json()["history"]
    return entries


def _image(env: AgentLab) -> str:
    path = env.image_dir / "disk.raw"
    path.write_bytes(bytes(4 * MIB))
    subprocess.run(["sgdisk", "-n", "1:2048:6143", str(path)], check=True, capture_output=True)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(env: AgentLab, vnode: VirtualNode, fast_track: bool) -> list[str]:
    """Take ``vnode`` through every flow; the report's lines."""
    client = env.stack.client
    node = client.post(
        "/v1/nodes",
        headers=LATEST,
        json={
            "name": vnode.name,
            "driver": "redfish",
            "driver_info": {
                "redfish_address": vnode.redfish_address,
                "redfish_system_id": vnode.redfish_system_id,
                "redfish_username": "admin",
                "redfish_password": "password",
                "fast_track": fast_track,
            },
            "boot_interface": "pxe",
            "deploy_interface": "direct",
            "inspect_interface": "agent",
            "instance_info": {
                "image_source": f"{env.images}/disk.raw",
                "image_checksum": f"sha256:{_image(env)}",
            },
        },
    ).json()
    client.post("/v1/ports", headers=LATEST, json={"node_uuid": node["uuid"], "address": vnode.mac})
    client.put(
        f"/v1/nodes/{vnode.name}/states/provision", headers=LATEST, json={"target": "manage"}
    )
    _wait(env, vnode.name, "manageable")
    lines = [f"## fast track {'on' if fast_track else 'off'}", ""]
    starts = vnode.agent_starts
    for label, target, stable in FLOWS:
        seen = len(_history(env, vnode.name))
        began = time.monotonic()
        requested = dt.datetime.now(dt.UTC)
        response = client.put(
            f"/v1/nodes/{vnode.name}/states/provision", headers=LATEST, json={"target": target}
        )
        if response.status_code != 202:
            raise RuntimeError(f"{label}: {response.status_code} {response.text}")
        _wait(env, vnode.name, stable)
        took = time.monotonic() - began
        lines.append(f"### {label}: {took:.2f} s")
        lines.append("")
        for entry in _history(env, vnode.name)[seen:]:
            at = dt.datetime.fromisoformat(entry["created_at"])
            offset = (at - requested).total_seconds()
            lines.append(f"    {offset:6.2f}  {entry['event']}")
        lines.append("")
    lines.append(f"agent starts: {vnode.agent_starts - starts}")
    lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, help="write the report here too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lab-timing-") as tmp:
        workdir = Path(tmp)
        config = lab_config(workdir / "lab", "t", nodes=2)
        config = dataclasses.replace(
            config,
            extra_kernel_params=(
                *config.extra_kernel_params,
                *demo.inspection_kernel_params(config.api_url),
            ),
        )
        lines: list[str] = []
        for env in agent_lab(workdir, config, agent_heartbeat_timeout=HEARTBEAT_TIMEOUT):
            lines += run(env, env.lab.nodes[0], fast_track=False)
            lines += run(env, env.lab.nodes[1], fast_track=True)
    report = "\n".join(lines)
    print(report)
    if args.output:
        args.output.write_text(report + "\n")


if __name__ == "__main__":
    main()
