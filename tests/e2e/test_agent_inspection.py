"""``baremetal node inspect --wait`` on a virtual node running the real ironic-python-agent.

One virtual node (a sushy-emulator system whose power-on boots the real
agent in namespaces on two loop disks), enrolled with the ``redfish``
hardware type and the ``agent`` inspect interface. The agent's inspection
collector posts its inventory to ``/v1/continue_inspection`` on the agents'
endpoint, as a ramdisk booted for inspection does (the lab gives every
agent ``ipa-inspection-callback-url``; a report while no inspection waits
is refused, and the agent carries on as usual). The node's properties,
ports and stored inventory are checked against the virtual hardware.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from metalforge.api.inspector.app import create_inspector_app
from metalforge_lab import demo
from metalforge_lab.lab import Lab
from tests.clients.conftest import BAREMETAL, BaremetalCli
from tests.support.api import LATEST
from tests.support.lab import lab_config, redfish_node_args, require_lab, served_for_lab
from tests.support.stack import Stack

pytestmark = pytest.mark.slow
LabStack = tuple[Lab, Stack, BaremetalCli]


@pytest.fixture(scope="module")
def lab_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabStack]:
    require_lab()
    if not BAREMETAL.exists():
        pytest.fail("python-ironicclient's `baremetal` is part of the test dependencies")
    workdir: Path = tmp_path_factory.mktemp("inspect-e2e")
    config = lab_config(workdir / "lab", "i", nodes=1)
    config = dataclasses.replace(
        config,
        extra_kernel_params=(
            *config.extra_kernel_params,
            *demo.inspection_kernel_params(config.api_url),
        ),
    )
    with Lab(config) as lab:
        with served_for_lab(lab, config, workdir) as (stack, server):
            yield lab, stack, BaremetalCli(server.url)
        assert not lab.errors, lab.errors


FIRST_DISK = {"path": "/extra/first_disk", "value": "{inventory[disks][0][name]}"}
IRONIC_RULE = {
    "conditions": [{"op": "eq", "args": ["{inventory[cpu][count]}", 2]}],
    "actions": [
        {"op": "add-trait", "args": {"name": "CUSTOM_TWO_CPUS"}},
        {"op": "set-attribute", "args": FIRST_DISK},
    ],
}
INSPECTOR_RULE = {
    "description": "2 GiB machines",
    "conditions": [{"op": "eq", "field": "memory_mb", "value": 2048}],
    "actions": [{"action": "set-capability", "name": "memory_checked", "value": "{data[cpus]}"}],
}


def test_inspect_wait_fills_properties_ports_and_inventory(lab_stack: LabStack) -> None:
    lab, stack, cli = lab_stack
    vnode = lab.nodes[0]
    # Rules in both formats act on what the real agent reports.
    cli.run(
        "inspection", "rule", "create",
        "--conditions", json.dumps(IRONIC_RULE["conditions"]),
        "--actions", json.dumps(IRONIC_RULE["actions"]),
    )  # fmt: skip
    inspector = TestClient(create_inspector_app(stack.app.state.services))
    assert inspector.post("/v1/rules", json=INSPECTOR_RULE).status_code == 201
    cli.run(*redfish_node_args(vnode), "--inspect-interface", "agent")
    cli.run("port", "create", vnode.mac, "--node", vnode.name)
    cli.run("node", "manage", vnode.name, "--wait", "60")
    cli.run("node", "inspect", vnode.name, "--wait", "240")

    node = cli.json("node", "show", vnode.name)
    assert node["provision_state"] == "manageable", node["last_error"]
    assert node["last_error"] is None
    assert node["power_state"] == "power off"
    # What the lab's hardware manager reports (src/metalforge_lab/ramdisk): two x86_64
    # CPUs, 2 GiB, its loop disks; the disks are 32 MiB: none to install on, local_gb 0.
    props = node["properties"]
    assert (props["cpu_arch"], props["cpus"], props["memory_mb"]) == ("x86_64", 2, 2048)
    assert props["local_gb"] == 0
    ports = cli.json("port", "list", "--node", vnode.name, "--long")
    assert vnode.mac in {p["address"] for p in ports}

    inventory = stack.client.get(f"/v1/nodes/{vnode.name}/inventory", headers=LATEST)
    assert inventory.status_code == 200, inventory.text
    reported = inventory.json()["inventory"]
    assert vnode.mac in {i["mac_address"] for i in reported["interfaces"]}
    assert {d.serial for d in vnode.disks} <= {d.get("serial") for d in reported["disks"]}
    assert vnode.agent_starts >= 1

    assert cli.json("node", "trait", "list", vnode.name) == [{"traits": "CUSTOM_TWO_CPUS"}]
    assert node["extra"]["first_disk"] == reported["disks"][0]["name"]
    assert "memory_checked:2" in node["properties"]["capabilities"]
