"""Runbooks with the real ``baremetal`` CLI: create, traits, clean and service with one, delete."""

from __future__ import annotations

import json

from tests.clients.conftest import BaremetalCli
from tests.support.stack import LiveServer

DELETE_RAID = [{"interface": "raid", "step": "delete_configuration", "args": {}, "order": 1}]


def test_runbook_lifecycle_clean_and_service(cli: BaremetalCli, live_server: LiveServer) -> None:
    created = cli.json(
        "runbook",
        "create",
        "--name",
        "raid-reset",
        "--steps",
        json.dumps(DELETE_RAID),
        "--description",
        "drop every array",
        "--extra",
        "team=storage",
    )
    assert created["name"] == "raid-reset"
    assert created["description"] == "drop every array"
    assert created["traits"] == []
    assert cli.json("runbook", "list") == [{"uuid": created["uuid"], "name": "raid-reset"}]
    cli.run("runbook", "trait", "add", "raid-reset", "CUSTOM_STORAGE")
    traits = cli.json("runbook", "trait", "list", "raid-reset")
    assert traits == [{"traits": "CUSTOM_STORAGE"}]
    cli.run("runbook", "set", "raid-reset", "--extra", "tier=1")
    shown = cli.json("runbook", "show", created["uuid"])
    assert shown["extra"] == {"team": "storage", "tier": 1}
    assert shown["steps"] == DELETE_RAID

    cli.run("node", "create", "--driver", "fake-hardware", "--name", "rb-node")
    cli.run("node", "manage", "rb-node", "--wait", "60")
    refused = cli.error("node", "clean", "rb-node", "--runbook", "raid-reset")
    assert "not been approved" in refused
    cli.run("node", "add", "trait", "rb-node", "CUSTOM_STORAGE")
    cli.run("node", "clean", "rb-node", "--runbook", "raid-reset")
    cli.until_state("rb-node", "manageable")
    cli.run("node", "provide", "rb-node")
    cli.until_state("rb-node", "available")
    cli.run("node", "deploy", "rb-node")
    cli.until_state("rb-node", "active")
    cli.run("node", "service", "rb-node", "--runbook", "raid-reset")
    cli.until_state("rb-node", "active")
    node = cli.json("node", "show", "rb-node", "--fields", "provision_state", "last_error")
    assert node == {"provision_state": "active", "last_error": None}

    cli.run("runbook", "delete", "raid-reset")
    assert cli.json("runbook", "list") == []
