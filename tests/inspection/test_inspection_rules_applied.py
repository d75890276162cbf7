"""Inspection rules applied to fake-hardware inspections, end to end in one process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import LATEST, create_node, error_text, provision, wait_for_state
from tests.support.stack import Stack, start_stack, test_settings

RULES = "/v1/inspection_rules"


def _rule(stack: Stack, **body: Any) -> dict[str, Any]:
    response = stack.client.post(RULES, json=body, headers=LATEST)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _inspected(stack: Stack, wanted: str = "manageable") -> dict[str, Any]:
    node = create_node(stack.client)
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    return wait_for_state(stack.client, node["uuid"], wanted)


def _get(stack: Stack, path: str) -> Any:
    response = stack.client.get(path, headers=LATEST)
    assert response.status_code == 200, response.text
    return response.json()


def test_rules_set_traits_capabilities_fields_ports_and_plugin_data(stack: Stack) -> None:
    _rule(
        stack,
        description="x86 machines",
        conditions=[{"op": "eq", "args": ["{inventory[cpu][architecture]}", "x86_64"]}],
        actions=[
            {"op": "add-trait", "args": {"name": "CUSTOM_X86"}},
            {"op": "set-capability", "args": {"name": "boot_mode", "value": "uefi"}},
            {
                "op": "set-attribute",
                "args": {"path": "/extra/cpu_count", "value": "{inventory[cpu][count]}"},
            },
            {
                "op": "set-port-attribute",
                "args": {
                    "port_id": "{inventory[interfaces][0][mac_address]}",
                    "path": "/physical_network",
                    "value": "provisioning",
                },
            },
            {"op": "set-plugin-data", "args": {"path": "rack", "value": "B7"}},
            {"op": "log", "args": {"msg": "seen {inventory[cpu][count]} cpus"}},
        ],
    )
    _rule(stack, conditions=[{"op": "eq", "args": [1, 2]}], actions=[
        {"op": "add-trait", "args": {"name": "CUSTOM_NEVER"}}
    ])  # fmt: skip
    done = _inspected(stack)
    uuid = done["uuid"]
    assert done["last_error"] is None
    assert _get(stack, f"/v1/nodes/{uuid}/traits")["traits"] == ["CUSTOM_X86"]
    assert "boot_mode:uefi" in done["properties"]["capabilities"]
    assert done["properties"]["cpus"] == 8, "processing's own properties stay"
    assert done["extra"]["cpu_count"] == "8"
    ports = _get(stack, f"/v1/ports?node={uuid}&detail=true")["ports"]
    assert [p["physical_network"] for p in ports] == ["provisioning"]
    assert _get(stack, f"/v1/nodes/{uuid}/inventory")["plugin_data"]["rack"] == "B7"
    history = [e["event"] for e in _get(stack, f"/v1/nodes/{uuid}/history")["history"]]
    assert any("x86 machines" in e and "applied" in e for e in history), history
    assert any("seen 8 cpus" in e for e in history), history


def test_a_fail_rule_fails_the_inspection_and_nothing_of_the_rules_is_written(
    stack: Stack,
) -> None:
    _rule(stack, priority=90, actions=[{"op": "add-trait", "args": {"name": "CUSTOM_FIRST"}}])
    _rule(
        stack,
        priority=50,
        description="memory floor",
        conditions=[{"op": "lt", "args": ["{inventory[memory][physical_mb]}", 65536]}],
        actions=[{"op": "fail", "args": {"msg": "not enough memory for this fleet"}}],
    )
    failed = _inspected(stack, "inspect failed")
    assert "memory floor" in failed["last_error"]
    assert "not enough memory for this fleet" in failed["last_error"]
    assert _get(stack, f"/v1/nodes/{failed['uuid']}/traits")["traits"] == []
    assert "cpus" not in failed["properties"], "the inspection wrote nothing"


def test_a_rule_on_auto_discovered_leaves_an_enrolled_node_alone(stack: Stack) -> None:
    _rule(
        stack,
        conditions=[{"op": "is-true", "args": {"value": "{node.auto_discovered}"}}],
        actions=[{"op": "set-attribute", "args": {"path": "/driver", "value": "ipmi"}}],
    )
    done = _inspected(stack)
    assert done["driver"] == "fake-hardware"
    assert done["last_error"] is None


def test_a_rule_setting_a_driver_this_service_lacks_fails_the_inspection(stack: Stack) -> None:
    _rule(
        stack,
        description="wrong driver",
        actions=[
            {"op": "set-attribute", "args": {"path": "/driver", "value": "no-such-driver"}},
            {"op": "add-trait", "args": {"name": "CUSTOM_SEEN"}},
        ],
    )
    failed = _inspected(stack, "inspect failed")
    assert "no-such-driver" in failed["last_error"], failed["last_error"]
    assert failed["driver"] == "fake-hardware"
    assert _get(stack, f"/v1/nodes/{failed['uuid']}/traits")["traits"] == []


@pytest.fixture
def built_in_stack(tmp_path: Path, sqlite_url: str) -> Iterator[tuple[Stack, Path]]:
    rules = tmp_path / "rules.yaml"
    settings = test_settings(sqlite_url, inspection={"built_in_rules": str(rules)})
    running = start_stack(settings)
    try:
        yield running, rules
    finally:
        running.stop()


def test_built_in_rules_apply_and_are_read_at_each_inspection(
    built_in_stack: tuple[Stack, Path],
) -> None:
    stack, rules = built_in_stack
    rules.write_text(
        "- description: every machine\n"
        "  priority: 20000\n"
        "  actions:\n"
        "    - op: add-trait\n"
        "      args: {name: CUSTOM_BUILT_IN}\n"
    )
    first = _inspected(stack)
    assert _get(stack, f"/v1/nodes/{first['uuid']}/traits")["traits"] == ["CUSTOM_BUILT_IN"]
    assert _get(stack, RULES)["inspection_rules"] == [], "built-in rules are not listed"

    rules.write_text(json.dumps([{"actions": [{"op": "explode", "args": {}}]}]))
    broken = _inspected(stack, "inspect failed")
    assert "unknown op 'explode'" in broken["last_error"]
    refused = stack.client.post(RULES, json={"actions": [{"op": "explode"}]}, headers=LATEST)
    assert refused.status_code == 400
    assert "args" in error_text(refused) or "explode" in error_text(refused)
