"""Two conductors never run under one hostname; a crashed run's successor starts."""

from __future__ import annotations

import time
import uuid as uuidlib
from pathlib import Path

import pytest
from sqlalchemy import select

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.process import ConductorProcess
from metalforge.config import ConductorSettings
from metalforge.db.engine import Database
from metalforge.db.models import Conductor
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry
from metalforge_lab.postgres import PostgresCluster
from tests.support.processes import ProcessGroup


def _service(db: Database, host: str = "twin") -> ConductorProcess:
    ctx = ConductorContext(
        hostname=host,
        db=db,
        drivers=DriverRegistry([HARDWARE_TYPES["fake-hardware"]]),
        settings=ConductorSettings(hostname=host, heartbeat_interval=0.3, heartbeat_timeout=30),
    )
    return ConductorProcess(ctx)


def test_a_crashed_runs_successor_starts_and_the_old_run_stands_down(sqlite_db: Database) -> None:
    crashed = _service(sqlite_db)
    crashed.register()  # then "crashes": no heartbeat follows, its row still looks fresh
    successor = _service(sqlite_db)
    successor.register()  # watches a little longer than a heartbeat interval, then takes over
    stood_down: list[bool] = []
    crashed.on_fatal = lambda: stood_down.append(True)
    crashed.heartbeat()  # it had only stalled: its next heartbeat finds the name taken
    assert stood_down == [True]
    assert crashed.ctx.stopping.is_set()
    successor.heartbeat()
    assert not successor.ctx.stopping.is_set()


def _registered(db: Database, host: str) -> bool:
    with db.read() as session:
        run_id = session.scalar(select(Conductor.run_id).where(Conductor.hostname == host))
    return run_id is not None


@pytest.mark.slow
@pytest.mark.postgres
def test_a_second_conductor_process_with_the_same_hostname_refuses_to_start(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    name = f"mf_twin_{uuidlib.uuid4().hex[:12]}"
    postgres.execute(f"CREATE DATABASE {name}")
    config = tmp_path / "metalforge.toml"
    config.write_text(
        f'[database]\nurl = "{postgres.url(name)}"\n'
        "[conductor]\nheartbeat_interval = 0.5\nheartbeat_timeout = 5.0\n"
    )
    with ProcessGroup(tmp_path, config) as group:
        group.run("db", "upgrade")
        first = group.start_conductor("twin")
        db = Database(postgres.url(name))
        try:
            deadline = time.monotonic() + 30
            while not _registered(db, "twin"):
                assert first.running(), first.log_text()
                assert time.monotonic() < deadline, first.log_text()
                time.sleep(0.2)
        finally:
            db.dispose()
        with pytest.raises(RuntimeError) as refused:
            group.run("conductor", env={"METALFORGE_CONDUCTOR__HOSTNAME": "twin"})
        assert "another conductor is running with hostname 'twin'" in str(refused.value)
        assert first.running(), "the first one keeps running"
