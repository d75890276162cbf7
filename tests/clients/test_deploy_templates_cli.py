"""Deploy templates with the real ``baremetal`` CLI: create/list/show/set/delete and a deploy.

ironicclient retries a 409 five times, two seconds apart, so the duplicate
name case costs about ten seconds and is tested once. The plan preview
(``deploying/steps``) is a metalforge addition no client knows: plain HTTP.
"""

from __future__ import annotations

import json
from typing import Any

from tests.clients.conftest import BaremetalCli
from tests.support.processes import http
from tests.support.stack import LiveServer

RAID1 = {"logical_disks": [{"raid_level": "1", "size_gb": "MAX", "is_root_volume": True}]}


def _steps(priority: Any = 90) -> str:
    return json.dumps(
        [
            {
                "interface": "raid",
                "step": "apply_configuration",
                "args": {"raid_config": RAID1},
                "priority": priority,
            }
        ]
    )


def test_deploy_template_lifecycle_and_deploy(cli: BaremetalCli, live_server: LiveServer) -> None:
    created = cli.json(
        "deploy", "template", "create", "CUSTOM_RAID1", "--steps", _steps(), "--extra", "team=ops"
    )
    assert created["name"] == "CUSTOM_RAID1"
    assert created["extra"] == {"team": "ops"}
    listed = cli.json("deploy", "template", "list")
    assert listed == [{"uuid": created["uuid"], "name": "CUSTOM_RAID1"}]
    shown = cli.json("deploy", "template", "show", "CUSTOM_RAID1")
    assert shown["steps"][0]["args"] == {"raid_config": RAID1}

    cli.run("deploy", "template", "set", "CUSTOM_RAID1", "--steps", _steps("85"))
    shown = cli.json("deploy", "template", "show", created["uuid"])
    assert shown["steps"][0]["priority"] == 85

    invalid = cli.error("deploy", "template", "create", "raid-one", "--steps", _steps())
    assert "must be a valid trait name" in invalid
    assert "HTTP 400" in invalid
    # Over HTTP: the CLI retries a 409 for 10 s before showing it (test_error_rendering).
    duplicate = http(
        "POST",
        f"{live_server.url}/v1/deploy_templates",
        {"name": "CUSTOM_RAID1", "steps": json.loads(_steps())},
        expect=(409,),
    )
    assert (
        "A deploy template with name CUSTOM_RAID1 already exists."
        in json.loads(duplicate["error_message"])["faultstring"]
    )

    cli.run("node", "create", "--driver", "fake-hardware", "--name", "tmpl-node")
    cli.run("node", "manage", "tmpl-node", "--wait", "60")
    cli.run("node", "provide", "tmpl-node")
    cli.until_state("tmpl-node", "available")
    cli.run("node", "add", "trait", "tmpl-node", "CUSTOM_RAID1")
    cli.run("node", "set", "tmpl-node", "--instance-info", 'traits=["CUSTOM_RAID1"]')
    preview = http(
        "GET", f"{live_server.url}/v1/nodes/tmpl-node/deploying/steps?traits=CUSTOM_RAID1"
    )
    assert [s["step"] for s in preview["plan"]][:3] == [
        "deploy",
        "apply_configuration",
        "write_image",
    ]
    cli.run("node", "deploy", "tmpl-node")
    cli.until_state("tmpl-node", "active")
    node = cli.json("node", "show", "tmpl-node", "--fields", "provision_state", "raid_config")
    assert node["provision_state"] == "active"
    assert node["raid_config"]["logical_disks"][0]["raid_level"] == "1"

    cli.run("deploy", "template", "delete", "CUSTOM_RAID1")
    assert cli.json("deploy", "template", "list") == []
    missing = cli.error("deploy", "template", "show", "CUSTOM_RAID1")
    assert "could not be found" in missing
