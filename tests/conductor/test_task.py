"""Node reservations: exclusive, fenced by the epoch, taken over from dead conductors."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import update

from metalforge import states
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.task import LockLost, acquire
from metalforge.config import ConductorSettings
from metalforge.db import agent_sessions
from metalforge.db.engine import Database
from metalforge.db.models import Conductor, Node, NodeHistory, utcnow
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.hardware import DriverRegistry
from metalforge.errors import NodeLocked


def _context(db: Database, host: str) -> ConductorContext:
    ctx = ConductorContext(
        hostname=host,
        db=db,
        drivers=DriverRegistry(HARDWARE_TYPES.values()),
        settings=ConductorSettings(hostname=host, heartbeat_timeout=5),
    )
    with db.write() as session:
        session.add(Conductor(hostname=host, drivers=["fake-hardware"], heartbeat_at=utcnow()))
    return ctx


@pytest.fixture
def db(db_url: str) -> Database:
    database = Database(db_url)
    database.upgrade()
    with database.write() as session:
        session.add(
            Node(
                uuid="00000000-0000-0000-0000-000000000001",
                driver="fake-hardware",
                provision_state=states.DEPLOYING,
                target_provision_state=states.ACTIVE,
                epoch=0,
            )
        )
    return database


def _node(db: Database) -> Node:
    with db.read() as session:
        node = session.get(Node, 1)
        assert node is not None
        return node


def test_reservation_is_exclusive_and_released(db: Database) -> None:
    one, two = _context(db, "c1"), _context(db, "c2")
    with acquire(one, 1, "deploy") as task:
        assert _node(db).reservation == "c1"
        with pytest.raises(NodeLocked, match="locked by host c1"), acquire(two, 1, "power"):
            pass
        task.node.extra = {"seen": True}
    node = _node(db)
    assert node.reservation is None
    assert node.extra == {"seen": True}


def test_a_conductor_that_lost_its_lock_cannot_write(db: Database) -> None:
    one, two = _context(db, "c1"), _context(db, "c2")
    stale = acquire(one, 1, "deploy")
    task = stale.__enter__()
    with one.db.write() as session:  # c1 stops heartbeating; c2 takes the node over
        session.execute(
            update(Conductor)
            .where(Conductor.hostname == "c1")
            .values(heartbeat_at=utcnow() - dt.timedelta(minutes=5))
        )
    with acquire(two, 1, "takeover") as taken:
        taken.node.extra = {"owner": "c2"}
    task.node.extra = {"owner": "c1"}
    with pytest.raises(LockLost):
        task.save()
    assert _node(db).extra == {"owner": "c2"}


def test_a_conductor_that_lost_the_node_cannot_touch_the_agent_session(db: Database) -> None:
    """The stalled owner must not void the token the new owner's agent holds."""
    one, two = _context(db, "c1"), _context(db, "c2")
    stale = acquire(one, 1, "deploy")
    task = stale.__enter__()
    task.begin_agent_session()
    with one.db.write() as session:  # c1 stalls; c2 takes the node over
        session.execute(
            update(Conductor)
            .where(Conductor.hostname == "c1")
            .values(heartbeat_at=utcnow() - dt.timedelta(minutes=5))
        )
    with acquire(two, 1, "takeover") as taken:
        taken.begin_agent_session()
        with db.write() as session:
            token = agent_sessions.issue_token(session, 1)
        assert token is not None
        taken.save()
        with pytest.raises(LockLost):
            task.end_agent_session()
        with pytest.raises(LockLost):
            task.begin_agent_session()
        with db.read() as session:
            current = agent_sessions.get(session, 1)
        assert current is not None
        assert current.token == token


def test_transition_is_fenced_and_recorded(db: Database) -> None:
    ctx = _context(db, "c1")
    with acquire(ctx, 1, "deploy") as task:
        epoch = task.epoch
        task.transition(states.DONE, last_error=None)
        assert task.epoch == epoch + 1
        assert task.released  # active is a resting state: released with the transition
    node = _node(db)
    assert (node.provision_state, node.target_provision_state) == (states.ACTIVE, None)
    assert node.reservation is None
    with db.read() as session:
        events = [h.event for h in session.query(NodeHistory).order_by(NodeHistory.id)]
    assert events[-1] == "deploying -> active (done)"
