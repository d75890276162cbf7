"""A conductor dies in the middle of a manual clean: another one finishes it.

One ``metalforge api`` and two ``metalforge conductor`` processes share a
PostgreSQL database. A node runs a five-step manual clean whose steps take
a while (``fake_step_delay``); once two steps have finished, the conductor
holding the node is SIGKILLed during the third. The survivor must notice the
death, take the node over and resume at the interrupted step: every step
finishes exactly once, none that had finished starts again, and the node
ends ``manageable`` with every step's effect in place. This is why clean
steps must be idempotent: the interrupted one runs a second time.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from metalforge_lab.postgres import PostgresCluster
from tests.support import fleet
from tests.support.processes import ProcessGroup, ServiceProcess, http

CONDUCTORS = ["conductor-a", "conductor-b"]
STEP_DELAY = 1.5
"""Seconds each fake step takes; a synchronous one holds the reservation that long."""
HEARTBEAT_TIMEOUT = 3.0
PLAN: list[dict[str, Any]] = [
    {"interface": "management", "step": "reset_bios"},
    {"interface": "deploy", "step": "erase_devices_metadata"},
    {"interface": "raid", "step": "delete_configuration"},
    {
        "interface": "bios",
        "step": "apply_configuration",
        "args": {"settings": [{"name": "boot_mode", "value": "uefi"}]},
    },
    {"interface": "raid", "step": "create_configuration"},
]
PLAN_NAMES = [f"{s['interface']}.{s['step']}" for s in PLAN]
RAID = {"logical_disks": [{"raid_level": "1", "size_gb": 100, "is_root_volume": True}]}


@pytest.fixture
def pg_url(postgres: PostgresCluster) -> str:
    return fleet.pg_database(postgres, "clean")


def _wait_rest(api: str, uuid: str, state: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    node = fleet.node(api, uuid)
    while time.monotonic() < deadline:
        node = fleet.node(api, uuid)
        if (
            node["provision_state"] == state
            and node["target_provision_state"] is None
            and node["reservation"] is None
        ):
            return node
        assert not node["provision_state"].endswith("failed"), node
        time.sleep(0.2)
    raise AssertionError(f"node never rested in {state}: {node}")


def _wait_for_holder(api: str, uuid: str, timeout: float) -> tuple[str, dict[str, Any]]:
    """The conductor running a synchronous step after two finished ones, and the node then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = fleet.node(api, uuid)
        if node["provision_state"] == "cleaning" and node["reservation"]:
            finished = fleet.step_counts(fleet.history(api, uuid), "clean", "finished")
            if sum(finished.values()) >= 2:
                node = fleet.node(api, uuid)
                if node["reservation"] and node["provision_state"] == "cleaning":
                    return str(node["reservation"]), node
        time.sleep(0.1)
    raise AssertionError(f"node {uuid} was never seen reserved mid-clean: {fleet.node(api, uuid)}")


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_killed_conductor_mid_clean_is_resumed_elsewhere(pg_url: str, tmp_path: Path) -> None:  # noqa: PLR0915 - one linear kill-and-resume scenario
    config = fleet.write_config(
        tmp_path / "metalforge.toml", pg_url, heartbeat_timeout=HEARTBEAT_TIMEOUT
    )
    with ProcessGroup(tmp_path, config) as group:
        group.run("db", "upgrade")
        conductors: dict[str, ServiceProcess] = {
            host: group.start_conductor(host) for host in CONDUCTORS
        }
        api_process = group.start_api("api")
        api_process.wait_http()
        assert api_process.url is not None
        api = api_process.url
        group.wait_for_conductors(api, CONDUCTORS)

        node = http(
            "POST",
            f"{api}/v1/nodes",
            {"name": "cleaned", "driver": "fake-hardware"},
            expect=(201,),
        )
        uuid = str(node["uuid"])
        fleet.put(api, f"/v1/nodes/{uuid}/states/provision", {"target": "manage"}, (202,))
        _wait_rest(api, uuid, "manageable", timeout=15)
        # Slow steps only now: verifying the node need not wait.
        http(
            "PATCH",
            f"{api}/v1/nodes/{uuid}",
            [{"op": "add", "path": "/driver_info/fake_step_delay", "value": STEP_DELAY}],
        )
        fleet.put(api, f"/v1/nodes/{uuid}/states/raid", RAID, (204,))
        fleet.put(
            api,
            f"/v1/nodes/{uuid}/states/provision",
            {"target": "clean", "clean_steps": PLAN},
            (202,),
        )

        holder, at_kill = _wait_for_holder(api, uuid, timeout=30)
        conductors[holder].kill()
        killed_at = time.monotonic()
        interrupted = f"{at_kill['clean_step']['interface']}.{at_kill['clean_step']['step']}"
        assert fleet.node(api, uuid)["reservation"] == holder, "the kill must land mid-step"

        final = _wait_rest(api, uuid, "manageable", timeout=45)
        took = time.monotonic() - killed_at
        print(f"killed {holder} during {interrupted}; the clean finished {took:.1f}s later")
        assert final["last_error"] is None
        assert final["clean_step"] == {}
        assert final["maintenance"] is False
        assert final["raid_config"]["logical_disks"][0]["raid_level"] == "1"
        assert fleet.bios(api, uuid) == {"boot_mode": "uefi"}

        events = fleet.history(api, uuid)
        print("\n".join(f"{e['conductor']}: {e['event']}" for e in events))
        # Every step finished exactly once, in the order asked for.
        finished_order = [
            e["event"].partition(" ")[0]
            for e in events
            if e["event_type"] == "clean_step" and " finished" in e["event"]
        ]
        assert finished_order == PLAN_NAMES
        kill_index = next(
            i
            for i, e in enumerate(events)
            if e["event_type"] == "takeover" and holder in e["event"]
        )
        before, after = events[:kill_index], events[kill_index:]
        done_before = set(fleet.step_counts(before, "clean", "finished"))
        assert len(done_before) >= 2, before
        # The survivor resumed where the dead conductor was: nothing that had
        # finished started again, and only the interrupted step ran twice.
        assert not done_before & set(fleet.step_counts(after, "clean", "started")), events
        twice = fleet.step_counts(events, "clean", "started") - Counter(PLAN_NAMES)
        assert set(twice) <= {interrupted}, (interrupted, twice)
        survivors = {e["conductor"] for e in after if e["conductor"]}
        assert survivors, after
        assert holder not in survivors, after
