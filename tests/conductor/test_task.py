"""Node reservations: exclusive, fenced by the epoch, taken over from dead conductors."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from sqlalchemy import func, select, update

from metalforge import states
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.reservations import acquire
from metalforge.conductor.task import LockLost
from metalforge.config import ConductorSettings
from metalforge.db import agent_sessions, flow_progress
from metalforge.db.engine import Database
from metalforge.db.flow_progress import NO_FLOW, FlowProgress
from metalforge.db.models import Conductor, FlowProgressRow, Node, NodeHistory, utcnow
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


def _stall(db: Database, host: str) -> None:
    """``host`` stops heartbeating: its reservations are free to take."""
    with db.write() as session:
        session.execute(
            update(Conductor)
            .where(Conductor.hostname == host)
            .values(heartbeat_at=utcnow() - dt.timedelta(minutes=5))
        )


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
    _stall(db, "c1")  # c2 may take the node over
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
    _stall(db, "c1")  # c2 may take the node over
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


def _progress(db: Database) -> FlowProgress:
    with db.read() as session:
        return flow_progress.load(session.connection(), 1)


def test_flow_progress_is_written_with_the_node_and_read_back_by_the_next_task(
    db: Database,
) -> None:
    ctx = _context(db, "c1")
    plan = ({"interface": "deploy", "step": "write_image", "priority": 80, "args": {}},)
    with acquire(ctx, 1, "deploy") as task:
        assert task.progress == NO_FLOW
        task.progress = FlowProgress(flow="deploy", plan=plan, step_started_at=10.0)
        epoch = task.epoch
        task.save()
        assert _progress(db).plan == plan
        assert _node(db).epoch == epoch  # a save is fenced, not a new epoch
    with acquire(ctx, 1, "deploy") as task:
        assert task.progress == FlowProgress(flow="deploy", plan=plan, step_started_at=10.0)
        task.progress = dataclasses.replace(task.progress, step_index=1)
        task.transition(states.DONE)
    assert _progress(db).step_index == 1  # written in the transition's transaction
    with acquire(ctx, 1, "clear") as task:
        task.progress = NO_FLOW
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(FlowProgressRow)) == 0


def test_a_conductor_that_lost_the_node_cannot_write_its_progress(db: Database) -> None:
    one, two = _context(db, "c1"), _context(db, "c2")
    stale = acquire(one, 1, "deploy")
    task = stale.__enter__()
    _ = task.progress
    _stall(db, "c1")  # c2 may take the node over
    with acquire(two, 1, "takeover") as taken:
        taken.progress = FlowProgress(flow="deploy", plan=(), step_index=0)
    # Only progress changed: the write is still fenced by the node's reservation.
    task.progress = FlowProgress(flow="deploy", plan=(), step_index=7)
    with pytest.raises(LockLost):
        task.save()
    assert _progress(db).step_index == 0


def test_progress_changed_after_the_release_is_refused(db: Database) -> None:
    ctx = _context(db, "c1")
    holding = acquire(ctx, 1, "deploy")
    task = holding.__enter__()
    task.transition(states.DONE)
    task.progress = FlowProgress(flow="deploy", plan=())
    with pytest.raises(LockLost, match="changed after its release"):
        task.release()
    assert _progress(db) == NO_FLOW
