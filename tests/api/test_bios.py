"""``/v1/nodes/{id}/bios``: a node's BIOS settings, stored after each BIOS step.

On fake-hardware, whose pretend firmware keeps what was applied; the
Redfish emulator's settings and registry are in tests/drivers/test_redfish.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    provision,
    version,
    wait_for_state,
)
from tests.support.stack import Stack

REGISTRY = (
    "attribute_type",
    "allowable_values",
    "lower_bound",
    "max_length",
    "min_length",
    "read_only",
    "reset_required",
    "unique",
    "upper_bound",
)


def _configured(client: TestClient, *settings: dict[str, Any]) -> str:
    node = create_node(client)
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    step = {"interface": "bios", "step": "apply_configuration", "args": {"settings": settings}}
    assert provision(client, node["uuid"], "clean", clean_steps=[step]).status_code == 202
    assert wait_for_state(client, node["uuid"], "manageable")["last_error"] is None
    return str(node["uuid"])


def test_settings_are_listed_and_shown_as_ironic_does(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    uuid = _configured(client, {"name": "VMX", "value": "on"}, {"name": "Cores", "value": 8})
    listed = client.get(f"/v1/nodes/{uuid}/bios", headers=LATEST).json()["bios"]
    assert [(s["name"], s["value"]) for s in listed] == [("Cores", "8"), ("VMX", "on")]
    assert set(listed[0]) == {"name", "value", "created_at", "updated_at", "links"}
    assert listed[1]["links"][0]["href"].endswith(f"/v1/nodes/{uuid}/bios/VMX")

    detailed = client.get(f"/v1/nodes/{uuid}/bios?detail=true", headers=LATEST).json()["bios"]
    assert set(detailed[0]) == {"name", "value", "created_at", "updated_at", "links", *REGISTRY}
    only = client.get(f"/v1/nodes/{uuid}/bios?fields=value", headers=LATEST).json()["bios"]
    assert set(only[0]) == {"value", "created_at", "updated_at", "links"}

    shown = client.get(f"/v1/nodes/{uuid}/bios/VMX", headers=LATEST).json()
    assert list(shown) == ["VMX"]
    assert shown["VMX"]["value"] == "on"
    assert set(shown["VMX"]) >= set(REGISTRY)
    old = client.get(f"/v1/nodes/{uuid}/bios/VMX", headers=version("1.73")).json()["VMX"]
    assert set(old) == {"name", "value", "created_at", "updated_at", "links"}


def test_a_later_step_updates_changed_settings_only(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    uuid = _configured(client, {"name": "VMX", "value": "on"}, {"name": "SRIOV", "value": "off"})
    step = {
        "interface": "bios",
        "step": "apply_configuration",
        "args": {"settings": [{"name": "SRIOV", "value": "on"}]},
    }
    assert provision(client, uuid, "clean", clean_steps=[step]).status_code == 202
    wait_for_state(client, uuid, "manageable")
    listed = client.get(f"/v1/nodes/{uuid}/bios", headers=LATEST).json()["bios"]
    by_name = {s["name"]: s for s in listed}
    assert by_name["SRIOV"]["value"] == "on"
    assert by_name["SRIOV"]["updated_at"] is not None
    assert by_name["VMX"]["updated_at"] is None


@pytest.mark.parametrize(
    ("path", "headers", "status", "text"),
    [
        ("/bios", version("1.39"), 404, "does not allow"),
        ("/bios/VMX", version("1.39"), 404, "does not allow"),
        ("/bios?detail=true", version("1.73"), 406, "detail"),
        ("/bios?fields=name", version("1.73"), 406, "fields"),
        ("/bios?fields=name&detail=true", LATEST, 400, "detail"),
        ("/bios?fields=colour", LATEST, 400, "colour"),
        ("/bios/NoSuchSetting", LATEST, 404, "NoSuchSetting"),
    ],
)
def test_bad_reads_are_refused(
    sqlite_stack: Stack, path: str, headers: dict[str, str], status: int, text: str
) -> None:
    client = sqlite_stack.client
    uuid = _configured(client, {"name": "VMX", "value": "on"})
    response = client.get(f"/v1/nodes/{uuid}{path}", headers=headers)
    assert response.status_code == status, response.text
    assert text in error_text(response)


def test_a_node_never_configured_has_no_settings(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)
    assert client.get(f"/v1/nodes/{node['uuid']}/bios", headers=LATEST).json() == {"bios": []}
    missing = client.get("/v1/nodes/no-such-node/bios", headers=LATEST)
    assert missing.status_code == 404
