"""A database out of reach: ridden out within the retries, then the conductor stops.

A conductor cut off for longer than ``database.retry_count`` attempts stops
rather than act on a stale picture; a shorter outage (a real network
partition, through a proxy the test cuts) costs nothing but time.
"""

from __future__ import annotations

import os
import threading
import time

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.process import ConductorProcess
from metalforge.config import ConductorSettings, CoordinationSettings
from metalforge.db.engine import Database, RetryPolicy
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry
from metalforge.startup import build_conductor
from metalforge_lab.postgres import PostgresCluster
from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    make_available,
    provision,
    wait_for_state,
    wait_until,
)
from tests.support.proxy import CuttableProxy
from tests.support.stack import start_stack, test_settings


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
    ctx.db = Database(
        "sqlite:////nonexistent/dir/metalforge.sqlite", retry=RetryPolicy(count=3, interval=0.05)
    )
    loop = threading.Thread(target=service._heartbeat_loop, daemon=True)
    loop.start()
    wait_until("the conductor to give up", lambda: stopped)
    loop.join(5)
    assert stopped == [True]
    assert ctx.stopping.is_set()
    assert not loop.is_alive()


def test_an_outage_shorter_than_the_retries_costs_nothing_but_time(
    postgres: PostgresCluster,
) -> None:
    name = f"mf_outage_{os.getpid()}"
    postgres.execute(f"CREATE DATABASE {name}")
    proxy = CuttableProxy(("127.0.0.1", postgres.port))
    proxy.start()
    settings = test_settings(
        postgres.url(name).replace(f":{postgres.port}/", f":{proxy.port}/"),
        heartbeat_interval=0.2,
        coordination={"election_interval": 0.2, "leader_lease": 2.0},
    )
    settings.database = settings.database.model_copy(
        update={"retry_count": 60, "retry_interval": 0.25, "connect_timeout": 2}
    )
    stack = start_stack(settings)
    try:
        node = make_available(stack.client, driver_info={"fake_step_delay": 1.0})
        assert provision(stack.client, node["uuid"], "manage").status_code == 202
        wait_for_state(stack.client, node["uuid"], "manageable")
        assert provision(stack.client, node["uuid"], "provide").status_code == 202
        wait_for_state(stack.client, node["uuid"], "cleaning")
        proxy.cut()
        # Meanwhile a client is told to come back, not that the server broke.
        answer = stack.client.get(f"/v1/nodes/{node['uuid']}", headers=LATEST)
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "5"
        assert "out of reach" in error_text(answer)
        time.sleep(3)  # the outage (within 60 x 0.25 s of retries)
        proxy.heal()
        done = wait_for_state(stack.client, node["uuid"], "available", timeout=120)
        assert done["last_error"] is None
        assert done["reservation"] is None
        assert not stack.conductor.ctx.stopping.is_set()
    finally:
        stack.stop()
        proxy.stop()


def test_an_outage_longer_than_the_heartbeat_timeout_runs_no_step_twice(
    postgres: PostgresCluster,
) -> None:
    """Two conductors lose the database together for longer than ``heartbeat_timeout``
    and the work leases: back, each sees the other's heartbeat too old and its leases
    expired, but neither takes the other's node or work over (the outage's length is
    allowed for), so the step under way runs once and every node finishes."""
    name = f"mf_long_outage_{os.getpid()}"
    postgres.execute(f"CREATE DATABASE {name}")
    proxy = CuttableProxy(("127.0.0.1", postgres.port))
    proxy.start()
    url = postgres.url(name).replace(f":{postgres.port}/", f":{proxy.port}/")
    settings = test_settings(
        url,
        heartbeat_interval=0.2,
        heartbeat_timeout=2.0,
        takeover_interval=0.2,
        # The outage outlasts the work items' leases too: neither conductor may take
        # the other's running item when its lease is found expired.
        lease_seconds=3.0,
        coordination={"election_interval": 0.2, "leader_lease": 2.0},
    )
    settings.database = settings.database.model_copy(
        update={"retry_count": 200, "retry_interval": 0.25, "connect_timeout": 2}
    )
    stack = start_stack(settings)
    other_db = Database(url, retry=RetryPolicy(count=200, interval=0.25), connect_timeout=2)
    second_settings = settings.model_copy(
        update={"conductor": settings.conductor.model_copy(update={"hostname": "second"})}
    )
    second = build_conductor(second_settings, other_db, stack.conductor.ctx.drivers)
    second.start()
    try:
        nodes = [create_node(stack.client, driver_info={"fake_step_delay": 2.0}) for _ in range(4)]
        for node in nodes:
            assert provision(stack.client, node["uuid"], "manage").status_code == 202
            wait_for_state(stack.client, node["uuid"], "manageable")
        for node in nodes:
            assert provision(stack.client, node["uuid"], "provide").status_code == 202
        for node in nodes:
            wait_for_state(stack.client, node["uuid"], "cleaning")
        proxy.cut()
        time.sleep(6)  # three heartbeat timeouts
        proxy.heal()
        for node in nodes:
            done = wait_for_state(stack.client, node["uuid"], "available", timeout=120)
            assert done["last_error"] is None
            assert done["reservation"] is None
            events = stack.client.get(
                f"/v1/nodes/{node['uuid']}/history?detail=true", headers=LATEST
            ).json()["history"]
            started = [
                e["event"].split(" ")[0]
                for e in events
                if e["event_type"] == "clean_step" and " started" in e["event"]
            ]
            shown = [(e["conductor"], e["event_type"], e["event"][:90]) for e in events]
            assert len(started) == len(set(started)), f"a step ran twice: {shown}"
            assert not [e for e in events if e["event_type"] == "takeover"], events
        assert not stack.conductor.ctx.stopping.is_set()
        assert not second.ctx.stopping.is_set()
    finally:
        second.stop()
        other_db.dispose()
        stack.stop()
        proxy.stop()
