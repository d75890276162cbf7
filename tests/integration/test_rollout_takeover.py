"""The conductor advancing a rollout is SIGKILLed mid-wave: another one finishes it.

One ``metalforge api`` and two ``metalforge conductor`` processes share one
PostgreSQL database. The conductor leading the ``rollouts`` role is killed
while a wave's nodes are being cleaned (slow fake steps), so none of its
clean-up runs. The survivor takes the role over once the dead one is known
dead, reads the rollout's rows, and carries on: every node ends cleaned and
``available``, none twice in the rollout, and the rollout is ``done``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from metalforge.db.models import LeaderLease
from metalforge_lab.postgres import PostgresCluster
from tests.support import fleet
from tests.support.processes import ProcessGroup, http

CONDUCTORS = ["conductor-a", "conductor-b"]
NODES = 4


@pytest.fixture
def pg_url(postgres: PostgresCluster) -> str:
    return fleet.pg_database(postgres, "rollout")


def _rollout(api: str, ident: str) -> dict[str, Any]:
    shown: dict[str, Any] = http("GET", f"{api}/v1/rollouts/{ident}")
    return shown


def _wait(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _leader(pg_url: str) -> str:
    engine = create_engine(pg_url)
    try:
        with engine.connect() as connection:
            holder = connection.scalar(
                select(LeaderLease.holder).where(LeaderLease.role == "rollouts")
            )
    finally:
        engine.dispose()
    return str(holder)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(150)
def test_a_rollout_survives_the_death_of_the_conductor_advancing_it(
    pg_url: str, tmp_path: Path
) -> None:
    config = fleet.write_config(
        tmp_path / "metalforge.toml",
        pg_url,
        rollout_interval=0.3,
        sections={"conductor.coordination": {"election_interval": 0.3, "leader_lease": 3.0}},
    )
    with ProcessGroup(tmp_path, config) as group:
        group.run("db", "upgrade")
        conductors = {host: group.start_conductor(host) for host in CONDUCTORS}
        api_process = group.start_api("api")
        api_process.wait_http()
        assert api_process.url is not None
        api = api_process.url
        group.wait_for_conductors(api, CONDUCTORS)

        nodes = []
        for n in range(NODES):
            node = http(
                "POST",
                f"{api}/v1/nodes",
                {"name": f"r{n}", "driver": "fake-hardware"},
                expect=(201,),
            )
            nodes.append(str(node["uuid"]))
            fleet.provision(api, node["uuid"], "manage")
        _wait(
            "every node manageable",
            lambda: all(fleet.node(api, u)["provision_state"] == "manageable" for u in nodes),
            30,
        )
        # Slow cleaning from here on, so the kill lands while a wave is under way.
        for uuid in nodes:
            http(
                "PATCH",
                f"{api}/v1/nodes/{uuid}",
                [{"op": "add", "path": "/driver_info/fake_step_delay", "value": 1.0}],
            )
        rollout = http(
            "POST",
            f"{api}/v1/rollouts",
            {"action": {"verb": "provide"}, "selector": {"nodes": nodes}, "batch": 2},
            expect=(201,),
        )
        _wait(
            "the first wave under way",
            lambda: _rollout(api, rollout["uuid"])["node_counts"]["running"] == 2,
            30,
        )
        leader = _leader(pg_url)
        assert leader in conductors, leader
        conductors[leader].kill()

        done = _wait(
            "the rollout to end",
            lambda: (shown := _rollout(api, rollout["uuid"]))["state"] == "done" and shown,
            90,
        )
        assert done["node_counts"]["succeeded"] == NODES, done["nodes"]
        assert _leader(pg_url) != leader, "the survivor took the role over"
        for uuid in nodes:
            node = fleet.node(api, uuid)
            assert node["provision_state"] == "available", node
            assert node["last_error"] is None, node
