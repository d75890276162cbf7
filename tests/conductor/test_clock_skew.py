"""Liveness is judged on the database's clock: a host whose clock is off takes nothing over."""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Callable

import pytest
from sqlalchemy import select

from metalforge import states
from metalforge.conductor.process import ConductorProcess
from metalforge.conductor.reservations import acquire
from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db.engine import Database
from metalforge.db.models import Node, utcnow
from metalforge.errors import NodeLocked
from metalforge_lab.postgres import PostgresCluster
from tests.support.conductors import registered_conductor

SKEW = dt.timedelta(minutes=10)
_numbers = itertools.count()


def _clock(offset: dt.timedelta) -> Callable[[], dt.datetime]:
    return lambda: utcnow() + offset


pytestmark = pytest.mark.postgres  # SQLite lives on one host: its clock is the local one


@pytest.fixture
def url(postgres: PostgresCluster) -> str:
    name = f"mf_skew_{os.getpid()}_{next(_numbers)}"
    postgres.execute(f"CREATE DATABASE {name}")
    db = Database(postgres.url(name))
    db.upgrade()
    db.dispose()
    return postgres.url(name)


def _conductor(url: str, host: str, offset: dt.timedelta) -> ConductorProcess:
    return registered_conductor(Database(url, local_clock=_clock(offset)), host)


def test_hosts_ten_minutes_apart_see_each_other_alive(url: str) -> None:
    right = _conductor(url, "right", dt.timedelta(0))
    fast = _conductor(url, "fast", SKEW)
    slow = _conductor(url, "slow", -SKEW)
    for service in (right, fast, slow):
        service.heartbeat()
    for service in (right, fast, slow):
        directory = ConductorDirectory(service.ctx.db, dead_after=30, ttl=1e12)
        assert sorted(h for h, _, _ in directory.live()) == ["fast", "right", "slow"]
    # The fast host's clock offset was measured, not assumed.
    assert abs(fast.ctx.db.clock.offset + SKEW) < dt.timedelta(seconds=5)


def test_a_fast_host_does_not_take_a_live_conductors_node(url: str) -> None:
    right = _conductor(url, "right", dt.timedelta(0))
    fast = _conductor(url, "fast", SKEW)
    with right.ctx.db.write() as session:
        session.add(
            Node(
                uuid="00000000-0000-0000-0000-0000000000aa",
                driver="fake-hardware",
                provision_state=states.AVAILABLE,
                epoch=0,
            )
        )
    with right.ctx.db.read() as session:
        node_id = session.scalar(select(Node.id))
    assert node_id is not None
    right.heartbeat()
    with (
        acquire(right.ctx, node_id, "deploy"),
        pytest.raises(NodeLocked),
        acquire(fast.ctx, node_id, "power"),
    ):
        pass
