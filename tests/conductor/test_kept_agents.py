"""The idle check of agents fast track kept running (``conductor.kept_agents``), and a power
request ending one, on a running stack with fake hardware.

The keep itself is played as a conductor writes it (``agent_sessions.keep``
and the ``agent_idle`` item, ``IdleCheck``), on a node resting in
``manageable`` with its power on; fake hardware's power interface records
what the check switched. The whole flow with the real agent is in
``tests/e2e/test_fast_track.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import select, update

from metalforge import states
from metalforge.db import agent_sessions, queue
from metalforge.db.models import Node, WorkItem
from metalforge.drivers.base import POWER_ON
from tests.support.api import LATEST, create_node, get_node, provision, wait_for_state, wait_until
from tests.support.stack import Stack


def _kept_node(stack: Stack, *, maintenance: bool = False) -> tuple[dict[str, Any], str]:
    """A manageable node, on, whose agent a flow kept; the idle check is due now."""
    node = create_node(stack.client, driver="fake-hardware")
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], states.MANAGEABLE)
    with stack.db.write() as session:
        node_id = session.scalars(select(Node.id).where(Node.uuid == node["uuid"])).one()
        session.execute(
            update(Node)
            .where(Node.id == node_id)
            .values(power_state=POWER_ON, maintenance=maintenance)
        )
        agent_sessions.begin(session, node_id)
        kept = agent_sessions.keep(session, node_id)
        assert kept is not None
    return node, kept.isoformat()


def _queue_check(stack: Stack, node: dict[str, Any], kept_since: str) -> None:
    with stack.db.write() as session:
        node_id = session.scalars(select(Node.id).where(Node.uuid == node["uuid"])).one()
        payload = dataclasses.asdict(agent_sessions.IdleCheck(kept_since))
        queue.enqueue(session, queue.AGENT_IDLE, node_id, payload)
    stack.conductor.ctx.waker.notify()


def _checks(stack: Stack, state: str) -> int:
    with stack.db.read() as session:
        rows = session.scalars(
            select(WorkItem.id).where(WorkItem.kind == queue.AGENT_IDLE, WorkItem.state == state)
        )
        return len(list(rows))


def _events(stack: Stack, ident: str) -> list[str]:
    response = stack.client.get(f"/v1/nodes/{ident}/history?detail=true", headers=LATEST)
    return [entry["event"] for entry in response.json()["history"]]


def _kept(stack: Stack, ident: str) -> bool:
    with stack.db.read() as session:
        node_id = session.scalars(select(Node.id).where(Node.uuid == ident)).one()
        return agent_sessions.is_kept(session, node_id)


def test_an_idle_kept_agent_is_powered_off_and_its_session_ended(stack: Stack) -> None:
    node, kept_since = _kept_node(stack)
    _queue_check(stack, node, kept_since)
    shown = wait_until(
        "the idle agent powered off",
        lambda: (n := get_node(stack.client, node["uuid"]))["power_state"] == "power off" and n,
    )
    assert shown["provision_state"] == states.MANAGEABLE
    assert not _kept(stack, node["uuid"])
    assert any("the kept agent was unused for" in e for e in _events(stack, node["uuid"]))


def test_an_agent_kept_again_since_is_left_to_its_own_check(stack: Stack) -> None:
    node, _kept_since = _kept_node(stack)
    _queue_check(stack, node, "2026-01-01T00:00:00+00:00")
    wait_until("the check ran", lambda: _checks(stack, queue.DONE) == 1)
    assert get_node(stack.client, node["uuid"])["power_state"] == "power on"
    assert _kept(stack, node["uuid"])


def test_a_node_in_maintenance_is_looked_at_again_later(stack: Stack) -> None:
    node, kept_since = _kept_node(stack, maintenance=True)
    _queue_check(stack, node, kept_since)
    wait_until("the check ran", lambda: _checks(stack, queue.DONE) == 1)
    assert _checks(stack, queue.PENDING) == 1, "the check is queued again, a timeout later"
    assert get_node(stack.client, node["uuid"])["power_state"] == "power on"
    assert _kept(stack, node["uuid"])


def test_a_power_request_ends_the_kept_agent(stack: Stack) -> None:
    node, _kept_since = _kept_node(stack)
    response = stack.client.put(
        f"/v1/nodes/{node['uuid']}/states/power", json={"target": "rebooting"}, headers=LATEST
    )
    assert response.status_code == 202, response.text
    # The session ends at once; the history row comes with the power change's
    # own write, after it: wait for the row, which says both are done.
    ended = "the agent kept for the next flow was ended by the power change"
    wait_until("the power change recorded", lambda: ended in _events(stack, node["uuid"]))
    assert not _kept(stack, node["uuid"])
