"""Highly available inspection: 200 inspections survive a killed worker and a stopped leader.

PostgreSQL, HAProxy in front of two ``metalforge api`` processes (the Ironic
API and the inspector API of each), three ``metalforge conductor`` workers.
Two hundred fake-hardware inspections are started at once through the real
``openstack baremetal introspection start``; while they run, one worker is
SIGKILLed and the leader of the singleton clean-up tasks is SIGTERMed. Then:

- every inspection ends ``finished``, or ``error`` with its reason;
- no report is processed twice (one port per node, one "inspection
  finished" per node in its history);
- each singleton task ran on one process at a time (from the processes' own
  logs of each run's start and end);
- the power-ons, across the three workers, never came faster than the
  cluster-wide throttle allows.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import psycopg
import pytest

from metalforge_lab.haproxy import HaProxy
from metalforge_lab.postgres import PostgresCluster
from tests.support import fleet
from tests.support.api import wait_until
from tests.support.processes import ProcessGroup, ServiceProcess, http

NODES = 200
WORKERS = ["worker-a", "worker-b", "worker-c"]
POWER_ON_INTERVAL = 0.05
"""Seconds between two power-ons, cluster-wide: 200 nodes take at least ten seconds."""
REPORT_DELAY = 2.0
"""Seconds the simulated ramdisk takes to report after its node powers on."""
OPENSTACK = Path(sys.executable).with_name("openstack")
_RUN = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO \S+: singleton (\S+) (starts|ends) on (\S+)$"
)


@pytest.fixture
def pg_url(postgres: PostgresCluster) -> str:
    return fleet.pg_database(postgres, "inspect_ha")


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _enroll(api: str) -> list[str]:
    uuids = []
    for i in range(NODES):
        node = http(
            "POST",
            f"{api}/v1/nodes",
            {
                "name": f"ha-{i}",
                "driver": "fake-hardware",
                "driver_info": {"fake_step_delay": REPORT_DELAY},
            },
            expect=(201,),
        )
        uuids.append(str(node["uuid"]))
        fleet.provision(api, str(node["uuid"]), "manage")
    deadline = time.monotonic() + 120
    while True:
        nodes = http("GET", f"{api}/v1/nodes?fields=provision_state&limit=1000")["nodes"]
        if all(n["provision_state"] == "manageable" for n in nodes):
            return uuids
        assert time.monotonic() < deadline, Counter(n["provision_state"] for n in nodes)
        time.sleep(0.5)


def _records(pg: str) -> list[tuple[str, str, str | None]]:
    with psycopg.connect(_libpq(pg)) as conn:
        return list(conn.execute("SELECT node_uuid, state, error FROM introspections").fetchall())


def _leader(pg: str, role: str) -> str | None:
    with psycopg.connect(_libpq(pg)) as conn:
        row = conn.execute(
            "SELECT holder FROM leader_leases WHERE role = %s AND expires_at > now()", (role,)
        ).fetchone()
    return None if row is None else row[0]


def _singleton_runs(
    workers: dict[str, ServiceProcess],
) -> dict[str, list[tuple[dt.datetime, dt.datetime, str]]]:
    """Each role's runs, (start, end, member), from every worker's log."""
    runs: dict[str, list[tuple[dt.datetime, dt.datetime, str]]] = defaultdict(list)
    for process in workers.values():
        open_runs: dict[str, dt.datetime] = {}
        for line in process.log_text().splitlines():
            match = _RUN.match(line)
            if match is None:
                continue
            at = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
            role, what, member = match.group(2), match.group(3), match.group(4)
            if what == "starts":
                open_runs[role] = at
            elif role in open_runs:
                runs[role].append((open_runs.pop(role), at, member))
        for role, started in open_runs.items():
            runs[role].append((started, started, process.name))  # killed mid-run
    return runs


def _power_ons(api: str) -> list[float]:
    nodes = http("GET", f"{api}/v1/nodes?detail=true&limit=1000")["nodes"]
    return sorted(
        float(n["driver_internal_info"]["fake_inspection_powered_on_at"])
        for n in nodes
        if "fake_inspection_powered_on_at" in n["driver_internal_info"]
    )


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_inspections_survive_a_killed_worker_and_a_stopped_leader(  # noqa: PLR0915 - one linear kill-and-failover scenario
    pg_url: str, tmp_path: Path
) -> None:
    config = fleet.write_config(
        tmp_path / "metalforge.toml",
        pg_url,
        workers=8,
        heartbeat_timeout=3.0,
        # Well inside the 30 s the test gives the stopped leader to exit.
        shutdown_timeout=15.0,
        lease_seconds=10.0,
        sections={
            "conductor.inspection": {
                "clean_up_period": 0.5,
                "power_on_interval": POWER_ON_INTERVAL,
            },
            "conductor.coordination": {"election_interval": 0.3, "leader_lease": 3.0},
        },
    )
    with ProcessGroup(tmp_path, config) as group:
        group.run("db", "upgrade")
        workers = {host: group.start_conductor(host) for host in WORKERS}
        apis = [group.start_api(f"api-{i}") for i in range(2)]
        for api_process in apis:
            api_process.wait_http()
        proxy = HaProxy(
            tmp_path,
            {
                "ironic": [int(str(p.url).rsplit(":", 1)[1]) for p in apis],
                "inspector": [int(str(p.inspector_port)) for p in apis],
            },
        )
        proxy.start()
        try:
            api = proxy.url("ironic")
            group.wait_for_conductors(api, WORKERS)
            uuids = _enroll(api)

            env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
            env.update(OS_AUTH_TYPE="none", INSPECTOR_URL=proxy.url("inspector"))
            starting = subprocess.Popen(
                [str(OPENSTACK), "baremetal", "introspection", "start", *uuids],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            # In the middle of it: a third of the inspections under way.
            wait_until(
                "inspections under way",
                lambda: sum(s != "starting" for _, s, _ in _records(pg_url)) >= NODES // 3,
                timeout=120,
            )
            leader = wait_until(
                "a leader", lambda: _leader(pg_url, "inspection-timeouts"), timeout=30
            )
            victim = next(host for host in WORKERS if host != leader)
            workers[victim].kill()
            workers[leader].stop(timeout=30)
            leader_proc = workers[leader].proc
            assert leader_proc is not None
            assert leader_proc.returncode == 0, "the leader did not stop cleanly"
            output, _ = starting.communicate(timeout=300)
            assert starting.returncode == 0, output.decode(errors="replace")

            def settled() -> list[tuple[str, str, str | None]] | None:
                records = _records(pg_url)
                done = [r for r in records if r[1] in ("finished", "error")]
                return records if len(done) == NODES else None

            records = wait_until("every inspection to end", settled, timeout=300)
            states = Counter(state for _, state, _ in records)
            print(f"killed {victim}, stopped leader {leader}; inspections: {dict(states)}")
            assert all(error for _, state, error in records if state == "error")
            assert states["finished"] >= NODES // 2

            # No report processed twice.
            ports = http("GET", f"{api}/v1/ports?fields=node_uuid&limit=1000")["ports"]
            per_node = Counter(p["node_uuid"] for p in ports)
            assert max(per_node.values()) == 1
            finished = {uuid for uuid, state, _ in records if state == "finished"}
            assert finished <= set(per_node)
            for uuid in uuids:
                events = [e["event"] for e in fleet.history(api, uuid)]
                assert sum(e.startswith("inspection finished") for e in events) <= 1, uuid

            # Each singleton on one process at a time.
            runs = _singleton_runs(workers)
            print({role: Counter(m for _, _, m in spans) for role, spans in runs.items()})
            # (The conductors' other singletons, such as the event log's pruning, may run too.)
            assert {"inspection-timeouts", "inspection-sync", "inspection-expiry"} <= set(runs)
            for role, spans in runs.items():
                ordered = sorted(spans)
                for (_, end, member), (start, _, other) in itertools.pairwise(ordered):
                    assert start >= end, f"{role}: {member} and {other} ran at once"

            # The power-ons never came faster than the throttle allows.
            times = _power_ons(api)
            print(f"{len(times)} power-ons over {times[-1] - times[0]:.1f}s")
            assert len(times) >= NODES
            # Turns are handed out POWER_ON_INTERVAL apart, and a node powers on at its turn
            # or later, never before: a worker the loaded machine wakes late fires after
            # its turn, close to the next ones. So a window holds the turns of itself plus
            # that lateness (half a second is generous on a 2-core machine running the
            # suite), while without the throttle hundreds would come within it.
            window, lateness = 1.0, 0.5
            allowed = int((window + lateness) / POWER_ON_INTERVAL) + 1
            for i, first in enumerate(times):
                within = sum(1 for t in times[i:] if t < first + window)
                assert within <= allowed, f"{within} power-ons within {window}s of {first}"
        finally:
            proxy.stop()
