"""``/v1/firmware_baselines`` and its drift report, on fake-hardware nodes whose firmware
the ``firmware.update`` step really changes (the emulator's is in tests/drivers)."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import LATEST, create_node, error_text, provision, wait_for_state
from tests.support.stack import Stack

BIOS_URL = "http://images.example.com/bios-1.0.1.bin"


def _baseline(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"fleet-{uuidlib.uuid4().hex[:8]}",
        "vendor": "fake",
        "model": "fake-hardware",
        "components": [{"component": "bios", "version": "1.0.1", "url": BIOS_URL}],
    }
    body.update(overrides)
    return body


def _create(client: TestClient, **overrides: Any) -> dict[str, Any]:
    response = client.post("/v1/firmware_baselines", json=_baseline(**overrides), headers=LATEST)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _manageable(client: TestClient, name: str | None = None) -> str:
    node = create_node(client, **({"name": name} if name else {}))
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    return str(node["uuid"])


def _flash(client: TestClient, uuid: str, component: str = "bios") -> None:
    """One ``firmware.update`` of ``component`` by manual cleaning (the fake bumps it)."""
    url = BIOS_URL if component == "bios" else f"http://images.example.com/{component}"
    step = {
        "interface": "firmware",
        "step": "update",
        "args": {"settings": [{"component": component, "url": url}]},
    }
    assert provision(client, uuid, "clean", clean_steps=[step]).status_code == 202
    assert wait_for_state(client, uuid, "manageable")["last_error"] is None


def _drift(client: TestClient, ident: str) -> dict[str, Any]:
    response = client.get(f"/v1/firmware_baselines/{ident}/drift", headers=LATEST)
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def test_create_show_list_delete(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    chosen = str(uuidlib.uuid4())
    created = _create(client, uuid=chosen, name="r650-2026q4", description="Q4 baseline")
    assert created["uuid"] == chosen
    assert created["components"] == [
        {"component": "bios", "version": "1.0.1", "url": BIOS_URL, "wait": 0}
    ]
    assert created["links"][0]["href"] == f"http://testserver/v1/firmware_baselines/{chosen}"
    assert client.get("/v1/firmware_baselines/r650-2026q4", headers=LATEST).json() == created
    listed = client.get("/v1/firmware_baselines", headers=LATEST).json()
    assert listed["firmware_baselines"] == [
        {
            "uuid": chosen,
            "name": "r650-2026q4",
            "vendor": "fake",
            "model": "fake-hardware",
            "links": created["links"],
        }
    ]
    detail = client.get("/v1/firmware_baselines?detail=true", headers=LATEST).json()
    assert detail["firmware_baselines"] == [created]
    only = client.get(f"/v1/firmware_baselines/{chosen}?fields=name", headers=LATEST).json()
    assert only == {"name": "r650-2026q4", "links": created["links"]}

    assert client.delete(f"/v1/firmware_baselines/{chosen}", headers=LATEST).status_code == 204
    gone = client.get(f"/v1/firmware_baselines/{chosen}", headers=LATEST)
    assert gone.status_code == 404
    assert error_text(gone) == f"Firmware baseline {chosen} could not be found."
    assert client.delete(f"/v1/firmware_baselines/{chosen}", headers=LATEST).status_code == 404


def test_listing_pages_with_a_marker(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    made = [_create(client, name=f"page-{n}")["uuid"] for n in range(3)]
    first = client.get("/v1/firmware_baselines?limit=2", headers=LATEST).json()
    assert [b["uuid"] for b in first["firmware_baselines"]] == made[:2]
    assert f"marker={made[1]}" in first["next"]
    rest = client.get(f"/v1/firmware_baselines?limit=2&marker={made[1]}", headers=LATEST).json()
    assert [b["uuid"] for b in rest["firmware_baselines"]] == made[2:]


def test_a_name_or_uuid_in_use_is_a_conflict(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    first = _create(client, name="taken")
    again = client.post("/v1/firmware_baselines", json=_baseline(name="taken"), headers=LATEST)
    assert again.status_code == 409
    assert error_text(again) == "A firmware baseline with name taken already exists."
    same_uuid = client.post(
        "/v1/firmware_baselines", json=_baseline(uuid=first["uuid"]), headers=LATEST
    )
    assert same_uuid.status_code == 409


@pytest.mark.parametrize(
    ("change", "text"),
    [
        (
            {"components": [{"component": "nic", "version": "2", "url": BIOS_URL}]},
            "no firmware interface can update component(s) nic (updatable: bios, bmc)",
        ),
        (
            {
                "components": [
                    {"component": "bios", "version": "2", "url": BIOS_URL},
                    {"component": "bios", "version": "3", "url": BIOS_URL},
                ]
            },
            "component(s) bios named twice",
        ),
        (
            {"components": [{"component": "bios", "version": "2", "url": "ftp://x/bios"}]},
            "is not an http(s) URL",
        ),
        (
            {"components": [{"component": "bios", "version": "2", "url": "http://[x"}]},
            "is not an http(s) URL",
        ),
        ({"components": []}, "components"),
        ({"components": [{"component": "bios", "url": BIOS_URL}]}, "version"),
        ({"components": [{"component": "bios", "version": 2, "url": BIOS_URL}]}, "version"),
        ({"name": "has space"}, "Expected a logical name but received has space."),
        ({"name": str(uuidlib.uuid4())}, "Expected a logical name"),
        ({"name": None}, "name"),
        ({"colour": "red"}, "colour"),
        ({"uuid": "not-a-uuid"}, "not-a-uuid"),
    ],
)
def test_bad_baselines_are_refused_and_nothing_is_stored(
    sqlite_stack: Stack, change: dict[str, Any], text: str
) -> None:
    client = sqlite_stack.client
    response = client.post("/v1/firmware_baselines", json=_baseline(**change), headers=LATEST)
    assert response.status_code == 400, response.text
    assert text in error_text(response)
    listed = client.get("/v1/firmware_baselines", headers=LATEST).json()
    assert listed["firmware_baselines"] == []


def test_a_body_that_is_not_an_object_is_refused(sqlite_stack: Stack) -> None:
    response = sqlite_stack.client.post("/v1/firmware_baselines", json=[1], headers=LATEST)
    assert response.status_code == 400


def test_baselines_are_not_patched(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    created = _create(client)
    patch = [{"op": "replace", "path": "/description", "value": "x"}]
    response = client.patch(f"/v1/firmware_baselines/{created['uuid']}", json=patch, headers=LATEST)
    assert response.status_code == 405


def test_drift_lists_older_and_unknown_nodes_until_they_are_updated(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    flashed = _manageable(client, "flashed")
    verified = _manageable(client, "verified-only")
    never = _manageable(client, "never-updated")
    _flash(client, flashed)
    # A bmc update writes the fake node's versions down, bios still the factory 1.0.0.
    _flash(client, verified, "bmc")

    pinned = _create(
        client,
        name="fake-q4",
        components=[
            {"component": "bios", "version": "1.0.1", "url": BIOS_URL},
            {"component": "bmc", "version": "1.0.1", "url": "http://images.example.com/bmc"},
        ],
    )
    report = _drift(client, "fake-q4")
    assert report["baseline_uuid"] == pinned["uuid"]
    assert report["covered_nodes"] == 2, "a node with no firmware recorded is no vendor's"
    by_node = {n["node_name"]: n for n in report["nodes"]}
    assert set(by_node) == {"flashed", "verified-only"}
    assert by_node["flashed"]["components"] == [
        {
            "component": "bmc",
            "expected_version": "1.0.1",
            "current_version": "1.0.0",
            "status": "older",
        }
    ]
    assert by_node["verified-only"]["components"] == [
        {
            "component": "bios",
            "expected_version": "1.0.1",
            "current_version": "1.0.0",
            "status": "older",
        }
    ]
    assert by_node["flashed"]["provision_state"] == "manageable"

    # A baseline for any vendor covers every node that can report firmware; one never
    # updated has nothing recorded, so its components are unknown.
    _create(client, name="anyone", vendor=None, model=None)
    anyone = {n["node_name"]: n for n in _drift(client, "anyone")["nodes"]}
    assert set(anyone) == {"verified-only", "never-updated"}
    assert anyone["never-updated"]["components"][0]["status"] == "unknown"
    assert anyone["never-updated"]["components"][0]["current_version"] is None
    assert never

    # Updated past the baseline: not older, but not the baseline either.
    _flash(client, flashed)
    after = {n["node_name"]: n for n in _drift(client, "anyone")["nodes"]}
    assert after["flashed"]["components"][0]["status"] == "differs"
    assert after["flashed"]["components"][0]["current_version"] == "1.0.2"

    # Another vendor's baseline covers none of them.
    _create(client, name="other-vendor", vendor="Contoso")
    assert _drift(client, "other-vendor") == {
        "baseline_uuid": _drift(client, "other-vendor")["baseline_uuid"],
        "baseline_name": "other-vendor",
        "covered_nodes": 0,
        "nodes": [],
    }


def test_drift_is_counted_in_metrics(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    _flash(client, _manageable(client), "bmc")
    _create(client, name="metrics-q4")
    text = client.get("/metrics", headers=LATEST).text
    line = 'metalforge_firmware_drift_nodes{baseline="metrics-q4",component="bios",status="older"}'
    assert f"{line} 1.0" in text
    unknown = (
        'metalforge_firmware_drift_nodes{baseline="metrics-q4",component="bios",status="unknown"}'
    )
    assert f"{unknown} 0.0" in text


def test_drift_of_an_unknown_baseline_is_404(sqlite_stack: Stack) -> None:
    response = sqlite_stack.client.get("/v1/firmware_baselines/none-such/drift", headers=LATEST)
    assert response.status_code == 404
    assert error_text(response) == "Firmware baseline none-such could not be found."


def test_a_component_url_shows_no_credentials(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    secret_url = "https://fw:s3cret@images.example.com/bios.bin?temp_url_sig=abc123"
    created = _create(
        client, components=[{"component": "bios", "version": "2.0", "url": secret_url}]
    )
    shown = client.get(f"/v1/firmware_baselines/{created['uuid']}", headers=LATEST).text
    for secret in ("s3cret", "abc123"):
        assert secret not in shown
        assert secret not in str(created)
    assert "images.example.com/bios.bin" in shown
