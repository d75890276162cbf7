"""``/v1/inspection_rules``: what Ironic's API suite asks of it, and the refusals around it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import LATEST, error_text, version
from tests.support.stack import Stack

BASE: dict[str, Any] = {
    "description": "Inspection rule to log node UUID",
    "conditions": [],
    "actions": [{"op": "log", "args": {"msg": "Node with UUID {node.uuid} is being inspected"}}],
    "phase": "main",
    "priority": 0,
    "sensitive": False,
}
URL = "/v1/inspection_rules"


def _create(client: TestClient, **changes: Any) -> dict[str, Any]:
    response = client.post(URL, json={**BASE, **changes}, headers=LATEST)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    assert response.headers["Location"].endswith(f"{URL}/{body['uuid']}")
    return body


def test_a_sensitive_rule_hides_its_conditions_and_actions(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    rule_uuid = str(uuid.uuid4())
    created = _create(client, uuid=rule_uuid, sensitive=True)
    assert created["uuid"] == rule_uuid
    shown = client.get(f"{URL}/{rule_uuid}", headers=LATEST).json()
    assert shown["sensitive"] is True
    assert (shown["conditions"], shown["actions"]) == (None, None)
    listed = client.get(f"{URL}?detail=true", headers=LATEST).json()["inspection_rules"]
    assert [r["actions"] for r in listed if r["uuid"] == rule_uuid] == [None]
    # One-way: a sensitive rule cannot be made to show its actions again.
    unset = [{"op": "replace", "path": "/sensitive", "value": False}]
    refused = client.patch(f"{URL}/{rule_uuid}", json=unset, headers=LATEST)
    assert refused.status_code == 400
    assert "cannot have the sensitive flag unset" in error_text(refused)


def test_conditions_and_actions_are_shown_back_as_given(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    conditions = [
        {
            "op": "eq",
            "args": ["{inventory.system.product_name}", "{item}"],
            "loop": ["product_name_1", "product_name_2", "product_name_3"],
            "multiple": "any",
        }
    ]
    actions = [
        {
            "op": "set-attribute",
            "args": ["{item[path]}", "{item[value]}"],
            "loop": [
                {"path": "/driver_info/ipmi_username", "value": "admin"},
                {"path": "/driver_info/ipmi_password", "value": "password"},
                {"path": "/driver_info/ipmi_address", "value": "{inventory[bmc_address]}"},
            ],
        }
    ]
    created = _create(client, conditions=conditions, actions=actions)
    assert (created["conditions"], created["actions"]) == (conditions, actions)


def test_a_patch_replaces_priority_conditions_and_actions(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    created = _create(client)
    patch: list[dict[str, Any]] = [
        {"op": "replace", "path": "/priority", "value": 200},
        {
            "op": "replace",
            "path": "/conditions",
            "value": [{"op": "eq", "args": ["{{ inventory.cpu.count }}", 8]}],
        },
        {
            "op": "replace",
            "path": "/actions",
            "value": [
                {"op": "set-attribute", "args": ["{{ /properties/cpu_model }}", "cpu_xyz"]},
                {"op": "log", "args": ["CPU model updated via rule."]},
            ],
        },
    ]
    response = client.patch(f"{URL}/{created['uuid']}", json=patch, headers=LATEST)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["priority"] == 200
    assert body["conditions"] == patch[1]["value"]
    assert body["actions"] == patch[2]["value"]
    assert body["updated_at"] is not None


@pytest.mark.parametrize("priority", [-1, 10000, 5000.50])
def test_a_priority_out_of_range_is_refused(sqlite_stack: Stack, priority: Any) -> None:
    client = sqlite_stack.client
    response = client.post(URL, json={**BASE, "priority": priority}, headers=LATEST)
    assert response.status_code == 400, response.text
    assert "riority" in error_text(response)
    assert client.get(URL, headers=LATEST).json()["inspection_rules"] == []


def test_an_unknown_rule_is_404_and_a_malformed_id_400(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    missing = client.delete(f"{URL}/{uuid.uuid4()}", headers=LATEST)
    assert missing.status_code == 404
    assert "could not be found" in error_text(missing)
    assert client.get(f"{URL}/not-a-uuid", headers=LATEST).status_code == 400


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"actions": [{"op": "set-attribute", "args": ["", "ipmi"]}]}, "path must name a key"),
        ({"actions": [{"op": "log", "args": {"msg": "{inventry[x]}"}}]}, "inventry"),
        (
            {"actions": [{"op": "log", "args": {"msg": "x"}}],
             "conditions": [{"op": "matches", "args": {"value": "x", "regex": "[a-"}}]},
            "regular expression",
        ),
        ({"actions": [{"op": "api-call", "args": {"url": "http://169.254.169.254/"}}]}, "api-call"),
        ({"actions": [{"op": "explode", "args": {}}]}, "unknown op"),
        ({"actions": [{"op": "log", "args": {"msg": "x"}}], "uuid": "nope"}, "UUID"),
    ],
)  # fmt: skip
def test_a_rule_that_does_not_read_is_refused_and_nothing_stored(
    sqlite_stack: Stack, body: dict[str, Any], message: str
) -> None:
    client = sqlite_stack.client
    response = client.post(URL, json=body, headers=LATEST)
    assert response.status_code == 400, response.text
    assert message in error_text(response)
    assert client.get(URL, headers=LATEST).json()["inspection_rules"] == []


def test_list_fields_pages_phase_and_delete_all(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    made = [_create(client, priority=p, description=f"rule {p}")["uuid"] for p in (10, 30, 20)]
    listed = client.get(f"{URL}?sort_key=priority&sort_dir=desc", headers=LATEST).json()
    rules = listed["inspection_rules"]
    assert [r["priority"] for r in rules] == [30, 20, 10]
    assert set(rules[0]) == {"uuid", "priority", "phase", "description", "links"}
    assert rules[0]["links"][0]["href"].endswith(f"{URL}/{rules[0]['uuid']}")
    page = client.get(f"{URL}?limit=2", headers=LATEST).json()
    assert len(page["inspection_rules"]) == 2
    assert "marker=" in page["next"]
    picked = client.get(f"{URL}?fields=uuid,actions", headers=LATEST).json()["inspection_rules"]
    assert set(picked[0]) == {"uuid", "actions", "links"}
    assert client.get(f"{URL}?phase=main", headers=LATEST).json()["inspection_rules"]
    assert client.get(f"{URL}?phase=other", headers=LATEST).json()["inspection_rules"] == []
    assert client.delete(URL, headers=LATEST).status_code == 204
    assert client.get(URL, headers=LATEST).json()["inspection_rules"] == []
    assert client.get(f"{URL}/{made[0]}", headers=LATEST).status_code == 404


def test_before_1_96_reads_are_404_and_writes_405(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    old = version("1.95")
    assert client.get(URL, headers=old).status_code == 404
    assert client.post(URL, json=BASE, headers=old).status_code == 405
    root = client.get("/v1/", headers=old).json()
    assert "inspection_rules" not in root
    assert "inspection_rules" in client.get("/v1/", headers=LATEST).json()
