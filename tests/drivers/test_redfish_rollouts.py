"""A firmware baseline rolled out over Redfish nodes of the emulator (sushy-tools).

The emulator's UpdateService really flashes: a system's ``BiosVersion`` moves
from 1.0.0 to 1.1.0. The rollout is advanced by the stack's own conductor
(its ``rollouts`` singleton task), as in production.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.config import load_settings
from tests.support.api import (
    LATEST,
    create_node,
    get_node,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.redfish import (
    PASSWORD,
    USER,
    Bmc,
    serve_directory,
    start_bmc,
    start_redfish_stack,
)
from tests.support.stack import FAST_CONDUCTOR, Stack


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[Bmc]:
    yield from start_bmc(tmp_path / "bmc", count=3, users={USER: PASSWORD})


@pytest.fixture
def images(tmp_path: Path) -> Iterator[str]:
    www = tmp_path / "www"
    www.mkdir()
    (www / "bios-1.1.0.bin").write_bytes(b"\0" * 4096)
    yield from serve_directory(www)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    settings = load_settings(
        database={"url": f"sqlite:///{tmp_path}/mf.sqlite"},
        conductor={
            **FAST_CONDUCTOR,
            "hostname": "test-conductor",
            "rollout_interval": 0.2,
            "coordination": {"election_interval": 0.2, "leader_lease": 2.0},
        },
    )
    running = start_redfish_stack(settings)
    try:
        yield running
    finally:
        running.stop()


def _rollout(stack: Stack, ident: str) -> dict[str, Any]:
    shown: dict[str, Any] = stack.client.get(f"/v1/rollouts/{ident}", headers=LATEST).json()
    return shown


def test_a_baseline_rolls_out_over_redfish_nodes_within_its_failure_budget(
    stack: Stack, bmc: Bmc, images: str
) -> None:
    client = stack.client
    systems = list(bmc.emulator.systems)
    nodes = []
    for n, system in enumerate(systems):
        node = create_node(
            client, name=f"rf{n}", driver="redfish", driver_info=bmc.driver_info(system)
        )
        assert provision(client, node["uuid"], "manage").status_code == 202
        wait_for_state(client, node["uuid"], "manageable")
        nodes.append(node["uuid"])
    firmware = client.get(f"/v1/nodes/{nodes[0]}/firmware", headers=LATEST).json()["firmware"]
    bios = next(c for c in firmware if c["component"] == "bios")
    # rf2's BMC will refuse the rollout's update: its password changed since verification.
    patch = [{"op": "replace", "path": "/driver_info/redfish_password", "value": "expired"}]
    assert client.patch(f"/v1/nodes/{nodes[2]}", json=patch, headers=LATEST).status_code == 200

    baseline = {
        "name": "emulator-bios",
        "vendor": bios["vendor"],
        "model": bios["model"],
        "components": [
            {"component": "bios", "version": "1.1.0", "url": f"{images}/bios-1.1.0.bin"}
        ],
    }
    made = client.post("/v1/firmware_baselines", json=baseline, headers=LATEST)
    assert made.status_code == 201, made.text
    drift = client.get("/v1/firmware_baselines/emulator-bios/drift", headers=LATEST).json()
    assert sorted(n["node_name"] for n in drift["nodes"]) == ["rf0", "rf1", "rf2"]
    assert {c["status"] for n in drift["nodes"] for c in n["components"]} == {"older"}

    body = {
        "name": "emulator-q4",
        "action": {"baseline": "emulator-bios"},
        "selector": {"drifted_from": "emulator-bios"},
        "canary": 1,
        "batch": 2,
        "max_failures": 1,
    }
    created = client.post("/v1/rollouts", json=body, headers=LATEST)
    assert created.status_code == 201, created.text
    wait_until("the canary to finish", lambda: _rollout(stack, "emulator-q4")["state"] == "paused")
    assert bmc.system(systems[0])["BiosVersion"] == "1.1.0"
    assert bmc.system(systems[1])["BiosVersion"] == "1.0.0", "nothing else before approval"
    assert client.post("/v1/rollouts/emulator-q4/resume", headers=LATEST).status_code == 200
    done = wait_until(
        "the rollout to end",
        lambda: (shown := _rollout(stack, "emulator-q4"))["state"] == "done" and shown,
        timeout=60,
    )
    states = {n["node_name"]: n["state"] for n in done["nodes"]}
    assert states == {"rf0": "succeeded", "rf1": "succeeded", "rf2": "failed"}
    failed = next(n for n in done["nodes"] if n["node_name"] == "rf2")
    assert "refused the credentials" in failed["error"]
    assert get_node(client, nodes[2])["provision_state"] == "clean failed"
    assert bmc.system(systems[1])["BiosVersion"] == "1.1.0"
    after = client.get("/v1/firmware_baselines/emulator-bios/drift", headers=LATEST).json()
    assert [n["node_name"] for n in after["nodes"]] == ["rf2"]
