"""Cleaning with the real ``baremetal`` CLI: RAID target, manual clean, refusals, abort.

The step catalogue (``GET /v1/nodes/{id}/cleaning/steps``) is a metalforge
addition no client knows, so it is read with plain HTTP, as an operator's
script would. ``--wait`` on ``clean`` polls every 10 seconds (ironicclient's
choice), so each waited clean costs up to that much.
"""

from __future__ import annotations

import json
from typing import Any

from tests.clients.conftest import BaremetalCli
from tests.support.processes import http
from tests.support.stack import LiveServer

RAID = {
    "logical_disks": [
        {"raid_level": "1", "size_gb": 100, "is_root_volume": True},
        {"raid_level": "5", "size_gb": "MAX"},
    ]
}


def _wait_for(cli: BaremetalCli, node: str, state: str, timeout: float = 30) -> dict[str, Any]:
    """Until ``node`` is in ``state`` (``abort``, ``clean`` without ``--wait`` return at once)."""
    fields = ("provision_state", "clean_step", "last_error")
    return cli.until(node, fields, lambda shown: shown["provision_state"] == state, timeout)


def test_manual_clean_with_raid_catalogue_refusal_and_abort(
    cli: BaremetalCli, live_server: LiveServer
) -> None:
    node = cli.json("node", "create", "--driver", "fake-hardware", "--name", "clean-cli")
    cli.run("node", "manage", "clean-cli", "--wait", "60")

    # `node set --target-raid-config` is the CLI's PUT /v1/nodes/{id}/states/raid.
    cli.run("node", "set", "clean-cli", "--target-raid-config", json.dumps(RAID))
    assert cli.json("node", "show", "clean-cli", "--fields", "target_raid_config") == {
        "target_raid_config": RAID
    }
    refused = cli.error(
        "node", "set", "clean-cli", "--target-raid-config", '{"logical_disks": [{"size_gb": 1}]}'
    )
    assert "logical_disks[0] needs raid_level" in refused

    catalogue = http("GET", f"{live_server.url}/v1/nodes/{node['uuid']}/cleaning/steps")["steps"]
    names = [f"{s['interface']}.{s['step']}" for s in catalogue]
    assert names[:2] == ["deploy.erase_devices_metadata", "deploy.erase_devices"]
    assert {"raid.create_configuration", "raid.delete_configuration"} <= set(names)
    automated = http("GET", f"{live_server.url}/v1/nodes/clean-cli/cleaning/steps?min_priority=1")
    assert [s["priority"] for s in automated["steps"]] == [99, 10]

    steps = [
        {"interface": "raid", "step": "delete_configuration"},
        {"interface": "raid", "step": "create_configuration"},
    ]
    cli.run("node", "clean", "clean-cli", "--clean-steps", json.dumps(steps))
    cli.until_state("clean-cli", "manageable")
    shown = cli.json("node", "show", "clean-cli", "--fields", "provision_state", "raid_config")
    assert shown["provision_state"] == "manageable"
    assert [d["raid_level"] for d in shown["raid_config"]["logical_disks"]] == ["1", "5"]

    unknown = cli.error(
        "node", "clean", "clean-cli", "--clean-steps", '[{"interface": "deploy", "step": "nope"}]'
    )
    assert "deploy.nope" in unknown
    missing = cli.error(
        "node", "clean", "clean-cli", "--clean-steps",
        '[{"interface": "bios", "step": "apply_configuration"}]',
    )  # fmt: skip
    assert "settings" in missing
    assert _wait_for(cli, "clean-cli", "manageable")["last_error"] is None

    # A slow, abortable step: the node waits in `clean wait` until the abort.
    cli.run("node", "set", "clean-cli", "--driver-info", "fake_step_delay=60")
    erase = '[{"interface": "deploy", "step": "erase_devices"}]'
    cli.run("node", "clean", "clean-cli", "--clean-steps", erase)
    waiting = _wait_for(cli, "clean-cli", "clean wait")
    assert waiting["clean_step"]["step"] == "erase_devices"
    cli.run("node", "abort", "clean-cli")
    # The step would run for 60 s: ending sooner (within the wait) means it was stopped.
    failed = _wait_for(cli, "clean-cli", "clean failed", timeout=30)
    assert "aborted" in failed["last_error"]
    assert failed["clean_step"] == {}
    cli.run("node", "manage", "clean-cli", "--wait", "60")
    assert _wait_for(cli, "clean-cli", "manageable")["provision_state"] == "manageable"
