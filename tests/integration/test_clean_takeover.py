"""A conductor dies in the middle of a manual clean or of servicing: another finishes it.

One ``metalforge api`` and two ``metalforge conductor`` processes share a
PostgreSQL database. A node runs a manual clean (or, deployed, a servicing)
of several steps that take a while (``fake_step_delay``); once two steps have
finished, the conductor holding the node is SIGKILLed during the third. The
survivor must notice the death, take the node over and resume at the
interrupted step: every step finishes exactly once, none that had finished
starts again, and the node ends where the flow returns it (``manageable``,
``active``) with every step's effect in place. This is why clean and service
steps must be idempotent: the interrupted one runs a second time.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
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
SERVICE_PLAN = [step for step in PLAN if step["interface"] != "deploy"]
"""The same steps but the agent's erase, which servicing does not offer."""
RAID = {"logical_disks": [{"raid_level": "1", "size_gb": 100, "is_root_volume": True}]}


@dataclass(frozen=True)
class Flow:
    name: str
    """``clean`` or ``service``: the target, the history's step events, the node's column."""
    plan: list[dict[str, Any]]
    busy: str
    """The state the node is in while a synchronous step runs."""
    returns_to: str

    @property
    def names(self) -> list[str]:
        return [f"{s['interface']}.{s['step']}" for s in self.plan]


FLOWS = [
    Flow("clean", PLAN, "cleaning", "manageable"),
    Flow("service", SERVICE_PLAN, "servicing", "active"),
]


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


def _wait_for_holder(api: str, uuid: str, flow: Flow, timeout: float) -> tuple[str, dict[str, Any]]:
    """The conductor running a synchronous step after two finished ones, and the node then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = fleet.node(api, uuid)
        if node["provision_state"] == flow.busy and node["reservation"]:
            finished = fleet.step_counts(fleet.history(api, uuid), flow.name, "finished")
            if sum(finished.values()) >= 2:
                node = fleet.node(api, uuid)
                if node["reservation"] and node["provision_state"] == flow.busy:
                    return str(node["reservation"]), node
        time.sleep(0.1)
    raise AssertionError(f"node {uuid} was never seen reserved mid-flow: {fleet.node(api, uuid)}")


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(150)
@pytest.mark.parametrize("flow", FLOWS, ids=lambda flow: flow.name)
def test_killed_conductor_mid_flow_is_resumed_elsewhere(  # noqa: PLR0915 - one linear kill-and-resume scenario
    pg_url: str, tmp_path: Path, flow: Flow
) -> None:
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
        if flow.name == "service":
            for target, rests in (("provide", "available"), ("active", "active")):
                fleet.put(api, f"/v1/nodes/{uuid}/states/provision", {"target": target}, (202,))
                _wait_rest(api, uuid, rests, timeout=30)
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
            {"target": flow.name, f"{flow.name}_steps": flow.plan},
            (202,),
        )

        holder, at_kill = _wait_for_holder(api, uuid, flow, timeout=30)
        conductors[holder].kill()
        killed_at = time.monotonic()
        running = at_kill[f"{flow.name}_step"]
        interrupted = f"{running['interface']}.{running['step']}"
        assert fleet.node(api, uuid)["reservation"] == holder, "the kill must land mid-step"

        final = _wait_rest(api, uuid, flow.returns_to, timeout=45)
        took = time.monotonic() - killed_at
        print(f"killed {holder} during {interrupted}; the {flow.name} finished {took:.1f}s later")
        assert final["last_error"] is None
        assert final[f"{flow.name}_step"] == {}
        assert final["maintenance"] is False
        assert final["raid_config"]["logical_disks"][0]["raid_level"] == "1"
        assert fleet.bios(api, uuid) == {"boot_mode": "uefi"}

        events = fleet.history(api, uuid)
        print("\n".join(f"{e['conductor']}: {e['event']}" for e in events))
        # Every step finished exactly once, in the order asked for.
        finished_order = [
            e["event"].partition(" ")[0]
            for e in events
            if e["event_type"] == f"{flow.name}_step" and " finished" in e["event"]
        ]
        assert finished_order == flow.names
        kill_index = next(
            i
            for i, e in enumerate(events)
            if e["event_type"] == "takeover" and holder in e["event"]
        )
        before, after = events[:kill_index], events[kill_index:]
        done_before = set(fleet.step_counts(before, flow.name, "finished"))
        assert len(done_before) >= 2, before
        # The survivor resumed where the dead conductor was: nothing that had
        # finished started again, and only the interrupted step ran twice.
        assert not done_before & set(fleet.step_counts(after, flow.name, "started")), events
        twice = fleet.step_counts(events, flow.name, "started") - Counter(flow.names)
        assert set(twice) <= {interrupted}, (interrupted, twice)
        survivors = {e["conductor"] for e in after if e["conductor"]}
        assert survivors, after
        assert holder not in survivors, after
