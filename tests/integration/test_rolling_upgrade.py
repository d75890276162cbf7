"""A rolling upgrade: the schema moves on under a running cluster, then each process does.

The previous release is this repository as it was just before its newest
migration (``git archive``). Its API and two conductors run on PostgreSQL at
the previous schema with inspections and cleanings in flight; the current
``metalforge db upgrade`` runs while they work; then each process is
replaced by the current code, one at a time, the way an operator rolls a
cluster. Every inspection and cleaning finishes, nothing is dead-lettered
and no node is left reserved.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text

from metalforge.db.models import WorkItem
from metalforge_lab.postgres import PostgresCluster
from tests.support.fleet import pg_database, provision, write_config
from tests.support.processes import ProcessGroup, ServiceProcess, http

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ROOT / "src" / "metalforge" / "db" / "migrations" / "versions"
CONDUCTORS = ["roll-a", "roll-b"]
INSPECTED = 6
CLEANED = 6


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def _previous_release(into: Path) -> tuple[Path, str]:
    """The source tree just before the newest migration, and the schema revision it wants."""
    newest = sorted(VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))[-1]
    previous = re.search(r'^down_revision = "(\w+)"', newest.read_text(), re.MULTILINE)
    assert previous is not None, newest
    if _git("rev-parse", "--is-shallow-repository") == "true":
        pytest.skip(
            "a shallow clone has no previous release to upgrade from (git fetch --unshallow)"
        )
    added = _git("log", "-1", "--format=%H", "--", str(newest.relative_to(ROOT)))
    assert added, f"{newest.name} is not committed yet: commit it to test the upgrade to it"
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", f"{added}^", "src/metalforge"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src", previous.group(1)


def _nodes(api: str) -> dict[str, dict[str, Any]]:
    fields = "uuid,name,provision_state,target_provision_state,reservation,last_error"
    listed = http("GET", f"{api}/v1/nodes?fields={fields}&limit=1000")["nodes"]
    return {n["name"]: n for n in listed}


def _create(api: str, name: str) -> str:
    created = http(
        "POST",
        f"{api}/v1/nodes",
        {"name": name, "driver": "fake-hardware", "driver_info": {"fake_step_delay": 1.5}},
        expect=(201,),
    )
    return str(created["uuid"])


def _wait(api: str, wanted: dict[str, str], timeout: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = _nodes(api)
        if all(
            nodes[name]["provision_state"] == state and nodes[name]["reservation"] is None
            for name, state in wanted.items()
        ):
            return nodes
        assert time.monotonic() < deadline, {
            name: (nodes[name]["provision_state"], nodes[name]["last_error"]) for name in wanted
        }
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_a_cluster_upgraded_while_it_works_finishes_its_flows(  # noqa: PLR0915 - one linear upgrade scenario, step by step
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    old_src, old_revision = _previous_release(tmp_path / "previous")
    url = pg_database(postgres, "roll")
    config = write_config(tmp_path / "metalforge.toml", url, log_level="WARNING")
    (tmp_path / "old").mkdir()
    old = ProcessGroup(tmp_path / "old", config, env={"PYTHONPATH": str(old_src)})
    new = ProcessGroup(tmp_path, config)
    try:
        old.run("db", "upgrade")
        engine = create_engine(url)
        with engine.connect() as connection:
            assert connection.scalar(text("SELECT version_num FROM alembic_version")) == (
                old_revision
            )
        conductors: dict[str, ServiceProcess] = {h: old.start_conductor(h) for h in CONDUCTORS}
        api_process = old.start_api("old-api")
        api_process.wait_http()
        api = str(api_process.url)
        old.wait_for_conductors(api, CONDUCTORS)

        inspected = [f"inspect-{i}" for i in range(INSPECTED)]
        cleaned = [f"clean-{i}" for i in range(CLEANED)]
        uuids = {name: _create(api, name) for name in inspected + cleaned}
        for uuid in uuids.values():
            provision(api, uuid, "manage")
        _wait(api, dict.fromkeys(uuids, "manageable"), timeout=120)
        for name in inspected:
            provision(api, uuids[name], "inspect")
        for name in cleaned:
            provision(api, uuids[name], "provide")

        # The schema moves on while the previous release works.
        new.run("db", "upgrade")
        # Then each process, one at a time: conductors first, the API last.
        for host in CONDUCTORS:
            conductors[host].stop(timeout=60)
            conductors[host] = new.start_conductor(host)
        api_process.stop(timeout=60)
        api_process = new.start_api("new-api")
        api_process.wait_http()
        api = str(api_process.url)
        new.wait_for_conductors(api, CONDUCTORS)

        wanted = {**dict.fromkeys(inspected, "manageable"), **dict.fromkeys(cleaned, "available")}
        nodes = _wait(api, wanted, timeout=240)
        for name in wanted:
            assert nodes[name]["last_error"] is None, nodes[name]
        for name in inspected:
            inventory = http("GET", f"{api}/v1/nodes/{uuids[name]}/inventory")
            assert inventory["inventory"]["cpu"]["count"] == 8, name
        with engine.connect() as connection:
            assert connection.scalar(text("SELECT version_num FROM alembic_version")) != (
                old_revision
            )
            left = connection.execute(
                select(WorkItem.kind, WorkItem.state, WorkItem.last_error).where(
                    WorkItem.state.in_(["pending", "claimed", "dead"])
                )
            ).all()
        engine.dispose()
        assert left == [], left
        logs = old.logs() + new.logs()
        assert "Traceback" not in logs, logs
    finally:
        old.stop_all()
        new.stop_all()
