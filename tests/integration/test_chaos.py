"""Chaos: conductors SIGKILLed at random during a burst of work; nothing is lost or doubled.

Two ``metalforge api`` and three ``metalforge conductor`` processes share one
PostgreSQL database. A hundred nodes are provided (automated cleaning),
deployed, some of them serviced and half of them undeployed (cleaning
again); a second hundred are partly inspected first and serve two hundred
allocations. An inspection whose report a kill caught mid-processing fails, as
the seed's strict transitions say (the report is never processed twice), and
is inspected again, as an operator would. Meanwhile a conductor chosen at random is SIGKILLed every
couple of seconds and restarted under its hostname. At the end every node
rests where it was asked to go (or in a failure state with a reason), holds
no reservation, no work is left and nothing was dead-lettered; no step that
had finished ran again (each finished exactly once per flow), no inspection
was processed twice; every allocation is active or in error, and no node
serves two.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from metalforge.db.models import WorkItem
from metalforge_lab.postgres import PostgresCluster
from tests.support.fleet import history, pg_database, provision, put, step_counts, write_config
from tests.support.processes import ProcessGroup, ServiceProcess, http

CONDUCTORS = ["chaos-a", "chaos-b", "chaos-c"]
FLOW_NODES = 100
POOL_NODES = 100
ALLOCATIONS = 200
MIN_KILLS = 5
KILL_EVERY = 2.0
"""Seconds between kills; a killed conductor is restarted half a second later."""
SETTLE_TIMEOUT = 240.0
CLEAN_STEPS = Counter({"deploy.erase_devices_metadata": 1, "deploy.erase_devices": 1})
DEPLOY_STEPS = Counter(
    {
        "deploy.deploy": 1,
        "deploy.write_image": 1,
        "deploy.prepare_instance_boot": 1,
        "deploy.tear_down_agent": 1,
        "deploy.boot_instance": 1,
    }
)
SERVICE_STEPS = [{"interface": "raid", "step": "delete_configuration"}]
SERVICED = 20
"""Of the flow nodes that stay active, how many are serviced."""
INSPECTED = 30
"""Of the pool nodes, how many are inspected before they are provided."""
STABLE = {"available", "active", "manageable", "enroll"}
INSPECTION_ENDS = {"manageable", "inspect failed"}
ROUNDS = 5
"""Inspections of one node, at most, before every inspected node must have finished one."""


@pytest.fixture
def pg_url(postgres: PostgresCluster) -> str:
    return pg_database(postgres, "chaos")


class Killer(threading.Thread):
    """SIGKILLs a random conductor every ``KILL_EVERY`` seconds and restarts it."""

    def __init__(self, group: ProcessGroup, conductors: dict[str, ServiceProcess]) -> None:
        super().__init__(name="chaos-killer", daemon=True)
        self.group = group
        self.conductors = conductors
        self.random = random.Random(20261124)
        self.kills: list[tuple[float, str]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(KILL_EVERY):
            host = self.random.choice(CONDUCTORS)
            self.conductors[host].kill()
            self.kills.append((time.monotonic(), host))
            time.sleep(0.5)
            self.conductors[host] = self.group.start_conductor(host)

    def stop(self) -> None:
        self.done.set()
        self.join(30)


def _create(api: str, name: str, resource_class: str) -> str:
    created = http(
        "POST",
        f"{api}/v1/nodes",
        {
            "name": name,
            "driver": "fake-hardware",
            "resource_class": resource_class,
            # Long enough that kills land mid-step, short enough for a quick burst.
            "driver_info": {"fake_step_delay": 0.2},
            "instance_info": {"image_source": "http://images.example/ubuntu.qcow2"},
        },
        expect=(201,),
    )
    return str(created["uuid"])


def _wait(api: str, uuids: list[str], state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        nodes = http("GET", f"{api}/v1/nodes?fields=uuid,provision_state&limit=1000")["nodes"]
        by_uuid = {n["uuid"]: n["provision_state"] for n in nodes}
        if all(by_uuid[u] == state for u in uuids):
            return
        assert time.monotonic() < deadline, Counter(by_uuid[u] for u in uuids)
        time.sleep(0.5)


DEJA_VU = "arrived again while the inspection was processing"
"""Why an inspection fails when the conductor processing its report was killed: the
report's redelivery finds it processing and, strict by design, never processes it twice."""


def _inspected(api: str, uuids: list[str], timeout: float) -> list[str]:
    """Until every inspection in ``uuids`` has ended; the nodes it failed for.

    The only failure allowed is the déjà vu of a report whose processing a kill
    interrupted (the seed's strict transition): the operator inspects such a node again.
    """
    deadline = time.monotonic() + timeout
    while True:
        nodes = http("GET", f"{api}/v1/nodes?fields=uuid,provision_state,last_error&limit=1000")[
            "nodes"
        ]
        by_uuid = {n["uuid"]: n for n in nodes if n["uuid"] in uuids}
        ended = [n for n in by_uuid.values() if n["provision_state"] in INSPECTION_ENDS]
        if len(ended) == len(uuids):
            failed = [n for n in ended if n["provision_state"] == "inspect failed"]
            for node in failed:
                assert DEJA_VU in (node["last_error"] or ""), node
            return [n["uuid"] for n in failed]
        assert time.monotonic() < deadline, Counter(n["provision_state"] for n in by_uuid.values())
        time.sleep(0.5)


def _settled(api: str, timeout: float) -> list[dict[str, Any]]:
    """Until every node rests (stable or failed) with no reservation and no target."""
    deadline = time.monotonic() + timeout
    while True:
        nodes: list[dict[str, Any]] = http(
            "GET",
            f"{api}/v1/nodes?fields=uuid,name,provision_state,target_provision_state,"
            "reservation,last_error,instance_uuid,allocation_uuid&limit=1000",
        )["nodes"]
        resting = [
            n
            for n in nodes
            if n["target_provision_state"] is None
            and n["reservation"] is None
            and (n["provision_state"] in STABLE or n["provision_state"].endswith("failed"))
        ]
        if len(resting) == len(nodes):
            return nodes
        assert time.monotonic() < deadline, [
            (n["name"], n["provision_state"], n["reservation"]) for n in nodes if n not in resting
        ][:20]
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_random_conductor_kills_lose_and_double_nothing(pg_url: str, tmp_path: Path) -> None:  # noqa: C901, PLR0912, PLR0915 - one chaos scenario, then its checks, read top to bottom
    config = write_config(
        tmp_path / "metalforge.toml",
        pg_url,
        log_level="WARNING",
        allocation_takeover_interval=2.0,
        poll_interval=0.5,
        async_poll_interval=0.3,
    )
    with ProcessGroup(tmp_path, config) as group:
        group.run("db", "upgrade")
        conductors = {host: group.start_conductor(host) for host in CONDUCTORS}
        apis = [group.start_api("api-a"), group.start_api("api-b")]
        for api in apis:
            api.wait_http()
        a, b = (str(api.url) for api in apis)
        group.wait_for_conductors(a, CONDUCTORS)

        flow = [_create(a if i % 2 else b, f"flow-{i:03}", "flow") for i in range(FLOW_NODES)]
        pool = [_create(b if i % 2 else a, f"pool-{i:03}", "pool") for i in range(POOL_NODES)]
        every = flow + pool
        for uuid in every:
            provision(a, uuid, "manage")
        _wait(a, every, "manageable", timeout=60)

        killer = Killer(group, conductors)
        started = time.monotonic()
        killer.start()
        inspected = pool[:INSPECTED]
        serviced = flow[FLOW_NODES // 2 : FLOW_NODES // 2 + SERVICED]
        try:
            again = inspected
            for _ in range(ROUNDS):
                for i, uuid in enumerate(again):
                    provision(a if i % 2 else b, uuid, "inspect")
                again = _inspected(a, again, timeout=SETTLE_TIMEOUT)
                if not again:
                    break
            assert not again, f"inspections still failing after {ROUNDS} rounds: {again}"
            for i, uuid in enumerate(every):
                provision(a if i % 2 else b, uuid, "provide")
            _wait(a, every, "available", timeout=SETTLE_TIMEOUT)
            allocations = []
            for i in range(ALLOCATIONS):
                created = http(
                    "POST",
                    f"{b if i % 2 else a}/v1/allocations",
                    {"resource_class": "pool", "name": f"alloc-{i:03}"},
                    expect=(201,),
                )
                allocations.append(created["uuid"])
            for i, uuid in enumerate(flow):
                provision(b if i % 2 else a, uuid, "active")
            _wait(a, flow, "active", timeout=SETTLE_TIMEOUT)
            for i, uuid in enumerate(serviced):
                put(
                    a if i % 2 else b,
                    f"/v1/nodes/{uuid}/states/provision",
                    {"target": "service", "service_steps": SERVICE_STEPS},
                )
            for i, uuid in enumerate(flow[: FLOW_NODES // 2]):
                provision(a if i % 2 else b, uuid, "deleted")
            _wait(a, serviced, "active", timeout=SETTLE_TIMEOUT)
            while len(killer.kills) < MIN_KILLS:
                time.sleep(0.2)
        finally:
            killer.stop()
        last_kill = killer.kills[-1][0]
        nodes = _settled(a, SETTLE_TIMEOUT)
        settled_at = time.monotonic()

        by_name = {n["name"]: n for n in nodes}
        for i in range(FLOW_NODES):
            found = by_name[f"flow-{i:03}"]
            wanted = "available" if i < FLOW_NODES // 2 else "active"
            assert found["provision_state"] == wanted, found
            assert found["last_error"] is None, found
        engine = create_engine(pg_url)
        try:
            deadline = time.monotonic() + 30
            while True:
                with engine.connect() as connection:
                    unfinished = connection.execute(
                        select(WorkItem.kind, WorkItem.state).where(
                            WorkItem.state.in_(["pending", "claimed"])
                        )
                    ).all()
                    dead = connection.execute(
                        select(WorkItem.kind, WorkItem.last_error).where(WorkItem.state == "dead")
                    ).all()
                if not unfinished or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        finally:
            engine.dispose()
        assert dead == [], dead
        assert unfinished == [], unfinished

        # No step that finished ran again: each finished once per flow it belongs to.
        taken_over = 0
        for i, uuid in enumerate(flow):
            events = history(a, uuid)
            taken_over += any(e["event_type"] == "takeover" for e in events)
            cleanings = 2 if i < FLOW_NODES // 2 else 1
            assert step_counts(events, "clean", "finished") == Counter(
                dict.fromkeys(CLEAN_STEPS, cleanings)
            ), (uuid, [e["event"] for e in events])
            assert step_counts(events, "deploy", "finished") == DEPLOY_STEPS, uuid
            services = Counter({"raid.delete_configuration": 1}) if uuid in serviced else {}
            assert step_counts(events, "service", "finished") == services, uuid
        for uuid in pool:
            events = history(a, uuid)
            taken_over += any(e["event_type"] == "takeover" for e in events)
            assert step_counts(events, "clean", "finished") == CLEAN_STEPS, uuid
            finished = [e for e in events if e["event"].startswith("inspection finished")]
            assert len(finished) == (uuid in inspected), (uuid, [e["event"] for e in events])
        for uuid in inspected:
            inventory = http("GET", f"{a}/v1/nodes/{uuid}/inventory")
            assert inventory["inventory"]["cpu"]["count"] == 8, uuid
        # The kills landed on work in progress: some nodes changed hands mid-flow.
        assert taken_over > 0

        # Allocations: each ended, none doubled, each active one on its own pool node.
        listed = http("GET", f"{a}/v1/allocations?limit=1000")["allocations"]
        assert sorted(x["uuid"] for x in listed) == sorted(allocations)
        states = Counter(x["state"] for x in listed)
        assert set(states) <= {"active", "error"}, states
        active = [x for x in listed if x["state"] == "active"]
        assert len(active) == POOL_NODES, states
        assert len({x["node_uuid"] for x in active}) == len(active)
        pool_nodes = {n["uuid"]: n for n in nodes if n["name"].startswith("pool-")}
        for x in active:
            assert pool_nodes[x["node_uuid"]]["instance_uuid"] == x["uuid"], x
            assert pool_nodes[x["node_uuid"]]["allocation_uuid"] == x["uuid"], x

        print(
            f"\nchaos: {len(killer.kills)} kills ({Counter(h for _, h in killer.kills)}), "
            f"{len(every)} nodes ({taken_over} taken over mid-flow), {ALLOCATIONS} allocations; "
            "burst done "
            f"{settled_at - started:.1f}s after it began, everything at rest "
            f"{settled_at - last_kill:.1f}s after the last kill"
        )
