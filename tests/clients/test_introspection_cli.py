"""The real ``openstack baremetal introspection`` commands against the inspector API.

python-openstackclient with python-ironic-inspector-client's plugin, run as
an operator runs it, against the all-in-one service's inspector port
(5050 in ``make run``; a free port here), on fake-hardware nodes whose
simulated ramdisk reports.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.clients.conftest import BaremetalCli, Cli
from tests.support.stack import LiveServer

OPENSTACK = Path(sys.executable).with_name("openstack")
TIMEOUT = 180.0


def introspection_cli(inspector_url: str) -> Cli:
    """``openstack baremetal introspection`` against one inspector API, without auth."""
    return Cli(
        [str(OPENSTACK), "baremetal", "introspection"],
        {"INSPECTOR_URL": inspector_url},
        timeout=TIMEOUT,
    )


def _wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _clients(live_server: LiveServer) -> tuple[BaremetalCli, Cli]:
    port = live_server.stack.settings.inspector.port
    return BaremetalCli(live_server.url), introspection_cli(f"http://127.0.0.1:{port}")


def _manageable(cli: BaremetalCli, name: str, **driver_info: str) -> str:
    args = [f"--driver-info={k}={v}" for k, v in driver_info.items()]
    node = cli.json("node", "create", "--driver", "fake-hardware", "--name", name, *args)
    cli.run("node", "manage", name, "--wait", "60")
    return str(node["uuid"])


def test_start_wait_status_list_and_data(live_server: LiveServer, tmp_path: Path) -> None:
    cli, introspection = _clients(live_server)
    uuid = _manageable(cli, "intro-1")
    started = introspection.json("start", "--wait", "intro-1")
    assert started == [{"UUID": "intro-1", "Error": None}]
    status = introspection.json("status", "intro-1")
    assert status["state"] == "finished"
    assert status["finished"] is True
    assert status["error"] is None
    assert status["uuid"] == uuid
    listed = introspection.json("list")
    assert [row["UUID"] for row in listed] == [uuid]
    saved = tmp_path / "data.json"
    introspection.run("data", "save", "--file", str(saved), "intro-1")
    data = json.loads(saved.read_text())
    assert data["inventory"]["cpu"]["count"] == 8
    unprocessed = json.loads(introspection.run("data", "save", "--unprocessed", uuid).stdout)
    assert "all_interfaces" not in unprocessed
    node = cli.json("node", "show", "intro-1")
    assert node["provision_state"] == "manageable"
    assert node["properties"]["memory_mb"] == 32768


def test_abort_and_reprocess(live_server: LiveServer) -> None:
    cli, introspection = _clients(live_server)
    _manageable(cli, "intro-slow", fake_step_delay="3600")
    introspection.run("start", "intro-slow")

    def waiting_unlocked() -> bool:
        node = cli.json("node", "show", "intro-slow")
        return bool(node["provision_state"] == "inspect wait" and not node["reservation"])

    # The conductor may still hold the node a moment after showing ``inspect wait``
    # (an abort then is a 409 "Node is locked", as ironic-inspector answers).
    _wait_until(waiting_unlocked)
    introspection.run("abort", "intro-slow")
    status = introspection.json("status", "intro-slow")
    assert (status["state"], status["error"]) == ("error", "Canceled by operator")
    # a node inspected before can be reprocessed from its stored report
    _manageable(cli, "intro-2")
    introspection.run("start", "intro-2")  # `start --wait` is proven above
    _wait_until(lambda: introspection.json("status", "intro-2")["state"] == "finished")
    cli.run("node", "set", "intro-2", "--property", "cpus=1")
    introspection.run("reprocess", "intro-2")
    _wait_until(lambda: cli.json("node", "show", "intro-2")["properties"]["cpus"] == 8)
    assert introspection.json("status", "intro-2")["state"] == "finished"


def test_errors_name_the_problem(live_server: LiveServer) -> None:
    cli, introspection = _clients(live_server)
    cli.json("node", "create", "--driver", "fake-hardware", "--name", "enrolled")
    refused = introspection.run("start", "enrolled", ok=False)
    assert 'Invalid provision state for introspection: "enroll"' in refused.output
    missing = introspection.run("status", "no-such-node", ok=False)
    assert "Could not find node no-such-node in cache" in missing.output


def test_baremetal_node_inspect_wait_on_fake_hardware(live_server: LiveServer) -> None:
    cli, introspection = _clients(live_server)
    cli.json("node", "create", "--driver", "fake-hardware", "--name", "inspected")
    cli.run("node", "manage", "inspected", "--wait", "60")
    cli.run("node", "inspect", "inspected", "--wait", "120")
    node = cli.json("node", "show", "inspected")
    assert node["provision_state"] == "manageable"
    assert node["properties"]["local_gb"] == 400
    ports = cli.json("port", "list", "--node", "inspected")
    assert len(ports) == 1
    # The same inspection as the inspector API sees it.
    assert introspection.json("status", "inspected")["state"] == "finished"


INSPECTOR_RULES = [
    {
        "description": "x86 machines get a trait",
        "conditions": [{"op": "eq", "field": "cpu_arch", "value": "x86_64"}],
        "actions": [
            {"action": "add-trait", "name": "CUSTOM_X86"},
            {"action": "set-capability", "name": "boot_mode", "value": "uefi"},
        ],
    },
    {
        "description": "small machines fail",
        "conditions": [{"op": "lt", "field": "memory_mb", "value": 16384}],
        "actions": [{"action": "fail", "message": "too little memory"}],
    },
]


def test_rules_imported_with_the_inspector_cli_act_on_an_inspection(
    live_server: LiveServer, tmp_path: Path
) -> None:
    cli, introspection = _clients(live_server)
    rules_file = tmp_path / "rules.json"
    rules_file.write_text(json.dumps(INSPECTOR_RULES))
    imported = introspection.json("rule", "import", str(rules_file))
    assert [row["Description"] for row in imported] == [r["description"] for r in INSPECTOR_RULES]
    listed = introspection.json("rule", "list")
    assert {row["UUID"] for row in listed} == {row["UUID"] for row in imported}
    shown = introspection.json("rule", "show", imported[0]["UUID"])
    assert shown["conditions"] == [
        {"op": "eq", "field": "cpu_arch", "value": "x86_64", "multiple": "any", "invert": False}
    ]
    # An Ironic-format rule beside them, through the baremetal CLI.
    actions = json.dumps([{"op": "set-attribute", "args": ["/extra/rack", "B7"]}])
    cli.run("inspection", "rule", "create", "--actions", actions, "--description", "rack")

    _manageable(cli, "ruled-1")
    introspection.run("start", "--wait", "ruled-1")
    node = cli.json("node", "show", "ruled-1")
    assert node["provision_state"] == "manageable", node["last_error"]
    assert cli.json("node", "trait", "list", "ruled-1") == [{"traits": "CUSTOM_X86"}]
    assert "boot_mode:uefi" in node["properties"]["capabilities"]
    assert node["extra"]["rack"] == "B7"

    introspection.run("rule", "delete", imported[0]["UUID"])
    assert len(introspection.json("rule", "list")) == 1
    introspection.run("rule", "purge")
    assert introspection.json("rule", "list") == []
    assert len(cli.json("inspection", "rule", "list")) == 1, "purge leaves Ironic's rules"
