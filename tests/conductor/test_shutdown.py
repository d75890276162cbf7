"""A conductor that stops gives back what it claimed and has not started, at once."""

from __future__ import annotations

from sqlalchemy import select

from metalforge.db import queue
from metalforge.db.models import Node, WorkItem
from tests.support.api import create_node, provision
from tests.support.stack import start_stack, test_settings


def test_an_item_claimed_as_the_conductor_stops_goes_back_with_its_node(db_url: str) -> None:
    stack = start_stack(test_settings(db_url), start_conductor=False)
    conductor = stack.conductor
    try:
        node = create_node(stack.client)
        assert provision(stack.client, node["uuid"], "manage").status_code == 202
        # The dispatcher's last round: it claims the item and reserves the node just
        # as the stop begins, before any worker has picked the item up.
        conductor.ctx.stopping.set()
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
        stack.client.close()
        stack.db.dispose()
