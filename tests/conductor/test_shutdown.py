"""A conductor that stops gives back what it claimed and has not started, at once."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from metalforge.conductor.process import ConductorProcess
from metalforge.db import queue
from metalforge.db.models import Node, WorkItem
from tests.support.api import create_node, provision
from tests.support.stack import start_stack, test_settings


def test_an_item_claimed_as_the_conductor_stops_goes_back_with_its_node(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = start_stack(test_settings(db_url), start_conductor=False)
    conductor = stack.conductor
    try:
        node = create_node(stack.client)
        assert provision(stack.client, node["uuid"], "manage").status_code == 202
        # The dispatcher's last round: it claims the item and reserves the node just
        # as the stop begins, before any worker has picked the item up.
        claim = conductor.dispatcher._lock_claimed

        def claimed_as_the_stop_begins(*args: Any) -> Any:
            ready = claim(*args)
            conductor.ctx.stopping.set()
            return ready

        monkeypatch.setattr(conductor.dispatcher, "_lock_claimed", claimed_as_the_stop_begins)
        assert conductor.dispatch_once() == 1
        # Nothing is left running: the stop does not wait out its bound for it.
        assert conductor.stop(timeout=30) is True
        with stack.db.read() as session:
            item = session.scalars(select(WorkItem)).one()
            reservation, state = session.execute(
                select(Node.reservation, Node.provision_state).where(Node.uuid == node["uuid"])
            ).one()
        assert (item.state, item.failures) == (queue.PENDING, 0)
        assert (reservation, state) == (None, "verifying")  # as the API left it
    finally:
        conductor.stop(timeout=5)
        stack.close_client()
        stack.db.dispose()


def test_a_stopping_conductor_claims_nothing_more(sqlite_url: str) -> None:
    stack = start_stack(test_settings(sqlite_url), start_conductor=False)
    conductor: ConductorProcess = stack.conductor
    try:
        node = create_node(stack.client)
        assert provision(stack.client, node["uuid"], "manage").status_code == 202
        conductor.ctx.stopping.set()
        assert conductor.dispatch_once() == 0
        with stack.db.read() as session:
            item = session.scalars(select(WorkItem)).one()
        assert (item.state, item.lease_owner) == (queue.PENDING, None)
    finally:
        conductor.stop(timeout=5)
        stack.close_client()
        stack.db.dispose()
