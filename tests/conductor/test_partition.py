"""A conductor cut off from the database stops rather than act on a stale picture."""

from __future__ import annotations

import threading

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.process import ConductorProcess
from metalforge.config import ConductorSettings, CoordinationSettings
from metalforge.db.engine import Database
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry
from tests.support.api import wait_until


def test_heartbeats_failing_in_a_row_stop_the_conductor(sqlite_db: Database) -> None:
    settings = ConductorSettings(
        hostname="cut-off",
        heartbeat_interval=0.05,
        coordination=CoordinationSettings(retry_count=3, election_interval=0.05, leader_lease=1),
    )
    ctx = ConductorContext(
        hostname="cut-off",
        db=sqlite_db,
        drivers=DriverRegistry([HARDWARE_TYPES["fake-hardware"]]),
        settings=settings,
    )
    service = ConductorProcess(ctx)
    service.register()
    stopped: list[bool] = []
    service.on_fatal = lambda: stopped.append(True)
    service.heartbeat()  # reachable: fine
    ctx.db = Database("sqlite:////nonexistent/dir/metalforge.sqlite")
    loop = threading.Thread(target=service._heartbeat_loop, daemon=True)
    loop.start()
    wait_until("the conductor to give up", lambda: stopped)
    loop.join(5)
    assert stopped == [True]
    assert ctx.stopping.is_set()
    assert not loop.is_alive()
