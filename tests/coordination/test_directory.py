"""The directory of live conductors reads them on first use, whatever the machine's uptime."""

from __future__ import annotations

import pytest

from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db.engine import Database
from metalforge.db.models import Conductor, utcnow


@pytest.fixture
def db(sqlite_db: Database) -> Database:
    return sqlite_db


def test_first_use_reads_the_conductors_even_with_a_ttl_longer_than_the_uptime(
    db: Database,
) -> None:
    # The monotonic clock counts from boot: a directory that took "never read" for
    # "read at 0.0" saw no conductor at all on machines up for less than its ttl
    # (power state sync uses an hour), which made every sync a no-op in fresh CI.
    with db.write() as session:
        session.add(Conductor(hostname="c1", drivers=["fake-hardware"], heartbeat_at=utcnow()))
    directory = ConductorDirectory(db, dead_after=30, ttl=1e12)
    assert [host for host, _, _ in directory.live()] == ["c1"]
    assert directory.owner("a-node", "fake-hardware", "") == "c1"


def test_invalidate_makes_the_next_use_read_again(db: Database) -> None:
    directory = ConductorDirectory(db, dead_after=30, ttl=1e12)
    assert directory.live() == []
    with db.write() as session:
        session.add(Conductor(hostname="c2", drivers=["fake-hardware"], heartbeat_at=utcnow()))
    assert directory.live() == []  # within the ttl: the earlier reading stands
    directory.invalidate()
    assert [host for host, _, _ in directory.live()] == ["c2"]
