"""A claim whose commit the database saved but whose answer was lost is given back.

The connection can drop after the server received the COMMIT: the claim
landed, but the dispatcher saw an error and started nothing. Left alone, the
item would wait out its lease and then find its node held for ever by a
conductor that is alive.
"""

from __future__ import annotations

import pytest
from sqlalchemy import event, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.conductor.reservations import acquire, drop_leaked_reservations
from metalforge.db import queue
from metalforge.db.models import Node, NodeHistory, WorkItem
from tests.support.api import create_node, provision, wait_for_state
from tests.support.stack import start_stack, test_settings


class CommitFails:
    """Makes the next commit fail with a dropped connection: after the database saved it
    (``after_commit``: the answer was lost), or before (``before_commit``: nothing landed)."""

    def __init__(self, when: str = "after_commit") -> None:
        self.when = when
        self.armed = True

    def __call__(self, session: Session) -> None:
        if self.armed:
            self.armed = False
            raise OperationalError("COMMIT", {}, Exception("server closed the connection"))

    def __enter__(self) -> CommitFails:
        event.listen(Session, self.when, self)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(Session, self.when, self)


def test_a_claim_committed_but_reported_failed_is_given_back(db_url: str) -> None:
    stack = start_stack(test_settings(db_url), start_conductor=False)
    conductor = stack.conductor
    try:
        node = create_node(stack.client)
        assert provision(stack.client, node["uuid"], "manage").status_code == 202
        with CommitFails(), pytest.raises(OperationalError):
            conductor.dispatch_once()
        with stack.db.read() as session:
            item = session.scalars(select(WorkItem)).one()
            reservation = session.scalar(select(Node.reservation).where(Node.uuid == node["uuid"]))
        # The claim landed: this conductor holds both, and no worker runs them.
        assert (item.state, reservation) == (queue.CLAIMED, "test-conductor")
        assert conductor.dispatcher.running() == []

        # The next round gives both back, claims the item again and runs it.
        assert conductor.dispatch_once() == 1
        done = wait_for_state(stack.client, node["uuid"], "manageable")
        assert (done["last_error"], done["reservation"]) == (None, None)
        with stack.db.read() as session:
            again = session.scalars(select(WorkItem)).one()
        assert (again.state, again.failures) == (queue.DONE, 0)
    finally:
        conductor.stop(timeout=5)
        stack.close_client()
        stack.db.dispose()


def test_a_reservation_committed_but_reported_failed_is_owed_back(db_url: str) -> None:
    stack = start_stack(test_settings(db_url), start_conductor=False)
    ctx = stack.conductor.ctx
    try:
        node = create_node(stack.client)
        with stack.db.read() as session:
            node_id, epoch = session.execute(
                select(Node.id, Node.epoch).where(Node.uuid == node["uuid"])
            ).one()
        with (
            CommitFails(),
            pytest.raises(OperationalError),
            acquire(ctx, node_id, "power state sync"),
        ):
            pytest.fail("no task is handed out when the lock's commit failed")
        # It landed: the node is held, and the heartbeat owes it back at that epoch.
        assert ctx.leaked_reservations == {(node_id, epoch + 1)}
        assert drop_leaked_reservations(ctx) == 0
        with stack.db.read() as session:
            assert session.scalar(select(Node.reservation).where(Node.id == node_id)) is None
    finally:
        stack.conductor.stop(timeout=5)
        stack.close_client()
        stack.db.dispose()


def test_a_node_write_committed_but_reported_failed_is_not_written_again(db_url: str) -> None:
    """A task's write lands but reports a dropped connection: it is not run again (its
    history would be written twice, and a release would find the node no longer held),
    and the task carries on as after a write that reported success."""
    stack = start_stack(test_settings(db_url), start_conductor=False)
    ctx = stack.conductor.ctx
    try:
        node = create_node(stack.client)
        with stack.db.read() as session:
            node_id = session.scalar(select(Node.id).where(Node.uuid == node["uuid"]))
        assert node_id is not None
        released: list[bool] = []
        with acquire(ctx, node_id, "test") as task:
            task.record("test", "written once")
            with CommitFails():
                task.save()
            task.on_release(lambda _session: released.append(True))
            with CommitFails():
                task.release()
        assert released == [True]
        with stack.db.read() as session:
            texts = list(
                session.scalars(select(NodeHistory.event).where(NodeHistory.node_id == node_id))
            )
            reservation = session.scalar(select(Node.reservation).where(Node.id == node_id))
        assert texts.count("written once") == 1
        assert reservation is None
    finally:
        stack.conductor.stop(timeout=5)
        stack.close_client()
        stack.db.dispose()


def test_a_transition_whose_commit_did_not_land_is_written_again_from_where_it_was(
    db_url: str,
) -> None:
    """The transition moved the node in memory as it wrote; the commit failed and nothing
    landed: the next attempt starts from the state the node is really in."""
    stack = start_stack(test_settings(db_url), start_conductor=False)
    ctx = stack.conductor.ctx
    try:
        node = create_node(stack.client)
        with stack.db.read() as session:
            node_id = session.scalar(select(Node.id).where(Node.uuid == node["uuid"]))
        assert node_id is not None
        with acquire(ctx, node_id, "test") as task:
            with CommitFails("before_commit"):
                task.transition(states.MANAGE, passing=True)
            assert task.node.provision_state == states.VERIFYING
        with stack.db.read() as session:
            texts = list(
                session.scalars(select(NodeHistory.event).where(NodeHistory.node_id == node_id))
            )
            state = session.scalar(select(Node.provision_state).where(Node.id == node_id))
        assert state == states.VERIFYING
        assert texts.count("enroll -> verifying (manage)") == 1
    finally:
        stack.conductor.stop(timeout=5)
        stack.close_client()
        stack.db.dispose()
