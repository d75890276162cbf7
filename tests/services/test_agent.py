"""The ramdisk agent's lookup and heartbeat through ``services.agent``, without HTTP.

A conductor booting the ramdisk is played by ``agent_sessions.begin``, as
in ``tests/api/test_agent_api.py``; no conductor runs, so a node stays in the
state a test puts it in. The tests read back the agent's session (the token
handed out once, the address a heartbeat pins) and the work a heartbeat
queued.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest
from sqlalchemy import select, update

from metalforge import states
from metalforge.conductor.flows import catalog
from metalforge.db import agent_sessions, queue
from metalforge.db.models import AgentSession, Node, Port, WorkItem
from metalforge.errors import RequestError
from metalforge.services import agent
from metalforge.services.context import Services

LATEST = (1, 115)
MAC = "52:54:00:12:34:56"
OTHER_MAC = "52:54:00:12:34:57"
URL = "https://10.0.0.5:9999"


def _node_in(
    svc: Services, state: str, macs: tuple[str, ...] = (MAC,), *, booted: bool = True, **fields: Any
) -> Node:
    """A node in ``state`` with ports ``macs``; ``booted``: a conductor just booted its ramdisk."""
    with svc.db.write() as session:
        node = Node(
            uuid=str(uuidlib.uuid4()),
            driver="fake-hardware",
            provision_state=state,
            target_provision_state=states.STATES[state].goal,
            **fields,
        )
        session.add(node)
        session.flush()
        session.add_all(Port(uuid=str(uuidlib.uuid4()), address=m, node_id=node.id) for m in macs)
        if booted:
            agent_sessions.begin(session, node.id)
    return node


def _session(svc: Services, node: Node) -> agent_sessions.AgentSessionInfo | None:
    with svc.db.read() as session:
        return agent_sessions.get(session, node.id)


def _token(svc: Services, node: Node) -> str | None:
    found = _session(svc, node)
    assert found is not None
    return found.token


def _work(svc: Services) -> list[tuple[str, int | None, str | None]]:
    with svc.db.read() as session:
        return [
            (w.kind, w.node_id, w.state)
            for w in session.scalars(select(WorkItem).order_by(WorkItem.id))
        ]


def _look_up(
    svc: Services, macs: list[str] | None = None, node_uuid: str | None = None, hand: bool = True
) -> agent.Found:
    return agent.look_up(svc, LATEST, macs or [], node_uuid, hand_token=hand)


def _beat(url: str = URL, version: str | None = "13.0.0") -> agent.Heartbeat:
    return agent.Heartbeat(
        callback_url=url, agent_version=version, verify_ca=None, status=None, status_message=None
    )


def _not_found(excinfo: pytest.ExceptionInfo[RequestError]) -> None:
    assert (excinfo.value.status, excinfo.value.message) == (404, "Node could not be found.")


# -- lookup -----------------------------------------------------------------------


def test_the_first_lookup_gets_the_token_later_ones_do_not(svc: Services) -> None:
    node = _node_in(svc, states.CLEAN_WAIT)
    first = _look_up(svc, [OTHER_MAC, MAC])
    assert first.node.uuid == node.uuid
    assert first.token is not None
    assert len(first.token) >= 32
    assert _token(svc, node) == first.token, "the token handed out is the session's"
    again = _look_up(svc, node_uuid=node.uuid)
    assert (again.node.uuid, again.token) == (node.uuid, None)
    assert _token(svc, node) == first.token


def test_a_client_that_cannot_take_the_token_leaves_it_for_the_agent(svc: Services) -> None:
    node = _node_in(svc, states.DEPLOY_WAIT)
    old = _look_up(svc, [MAC], hand=False)
    assert (old.node.uuid, old.token) == (node.uuid, None)
    assert _token(svc, node) is None
    real = _look_up(svc, [MAC])
    assert real.token is not None
    assert _token(svc, node) == real.token


def test_only_a_node_in_a_lookup_state_is_found(svc: Services) -> None:
    node = _node_in(svc, states.AVAILABLE)
    for state in states.STATES:
        with svc.db.write() as session:
            session.execute(update(Node).where(Node.id == node.id).values(provision_state=state))
            agent_sessions.begin(session, node.id)
        if state in catalog.LOOKUP_STATES:
            assert _look_up(svc, [MAC]).token is not None, state
            continue
        with pytest.raises(RequestError) as refused:
            _look_up(svc, [MAC])
        _not_found(refused)
        assert _token(svc, node) is None, f"no token may leave for a node in {state}"


def test_an_agent_a_flow_kept_running_is_found_out_of_a_flow(svc: Services) -> None:
    node = _node_in(svc, states.MANAGEABLE)
    with pytest.raises(RequestError) as refused:
        _look_up(svc, [MAC])
    _not_found(refused)
    with svc.db.write() as session:
        assert agent_sessions.keep(session, node.id) is not None
    assert _look_up(svc, [MAC]).token is not None, "fast track: the kept agent looks up"
    with svc.db.write() as session:
        agent_sessions.end(session, node.id)
        assert not agent_sessions.is_kept(session, node.id)
        assert agent_sessions.keep(session, node.id) is None, "an ended session is not kept"
    with pytest.raises(RequestError) as refused:
        _look_up(svc, [MAC])
    _not_found(refused)


def test_a_node_no_conductor_booted_is_not_found(svc: Services) -> None:
    node = _node_in(svc, states.CLEAN_WAIT, booted=False)
    for kwargs in ({"macs": [MAC]}, {"node_uuid": node.uuid}):
        with pytest.raises(RequestError) as refused:
            _look_up(svc, **kwargs)
        _not_found(refused)
    with svc.db.read() as session:
        assert list(session.scalars(select(AgentSession.node_id))) == []


def test_addresses_that_name_no_node_or_two_nodes_find_nothing(svc: Services) -> None:
    one = _node_in(svc, states.CLEAN_WAIT, (MAC,))
    two = _node_in(svc, states.CLEAN_WAIT, (OTHER_MAC,))
    for macs in ([MAC, OTHER_MAC], ["52:54:00:ff:ff:ff"], []):
        with pytest.raises(RequestError) as refused:
            _look_up(svc, macs)
        _not_found(refused)
    assert (_token(svc, one), _token(svc, two)) == (None, None)


def test_an_unknown_node_uuid_is_404(svc: Services) -> None:
    _node_in(svc, states.CLEAN_WAIT)
    missing = str(uuidlib.uuid4())
    with pytest.raises(RequestError) as refused:
        _look_up(svc, node_uuid=missing)
    assert refused.value.status == 404
    with pytest.raises(RequestError) as refused:
        _look_up(svc, node_uuid="not-a-uuid")
    assert refused.value.status == 400


def test_lookup_does_not_wait_for_the_nodes_reservation(svc: Services) -> None:
    node = _node_in(svc, states.CLEAN_WAIT, reservation="conductor-1")
    found = _look_up(svc, [MAC])
    assert found.node.uuid == node.uuid
    assert _token(svc, node) == found.token


# -- heartbeat ----------------------------------------------------------------------


def test_a_heartbeat_in_clean_wait_is_recorded_and_queues_a_check(
    svc: Services, wakes: list[str]
) -> None:
    node = _node_in(svc, states.CLEAN_WAIT)
    token = _look_up(svc, [MAC]).token
    assert token is not None
    agent.heartbeat(svc, node.uuid, LATEST, token, _beat())
    stored = _session(svc, node)
    assert stored is not None
    assert (stored.agent_url, stored.agent_version) == (URL, "13.0.0")
    assert _work(svc) == [(queue.PROVISION, node.id, queue.PENDING)]
    assert wakes == ["notify"]
    agent.heartbeat(svc, node.uuid, LATEST, token, _beat())
    assert _work(svc) == [(queue.PROVISION, node.id, queue.PENDING)], "one pending check a node"


def test_a_heartbeat_in_cleaning_is_recorded_but_queues_nothing(
    svc: Services, wakes: list[str]
) -> None:
    assert states.CLEANING not in catalog.AGENT_WAKE_STATES
    node = _node_in(svc, states.CLEANING, name="rack1-n1")
    token = _look_up(svc, [MAC]).token
    assert token is not None
    agent.heartbeat(svc, "rack1-n1", LATEST, token, _beat())
    stored = _session(svc, node)
    assert stored is not None
    assert stored.agent_url == URL
    assert _work(svc) == []
    assert wakes == []


def test_a_heartbeat_with_a_wrong_token_changes_nothing(svc: Services, wakes: list[str]) -> None:
    node = _node_in(svc, states.CLEAN_WAIT)
    token = _look_up(svc, [MAC]).token
    with pytest.raises(RequestError) as refused:
        agent.heartbeat(svc, node.uuid, LATEST, "x" * 43, _beat())
    assert refused.value.status == 400
    assert "Invalid or missing agent token" in refused.value.message
    stored = _session(svc, node)
    assert stored is not None
    assert (stored.token, stored.agent_url, stored.last_heartbeat_at) == (token, None, None)
    assert _work(svc) == []
    assert wakes == []


def test_a_heartbeat_from_another_address_is_refused(svc: Services) -> None:
    node = _node_in(svc, states.CLEAN_WAIT)
    token = _look_up(svc, [MAC]).token
    assert token is not None
    agent.heartbeat(svc, node.uuid, LATEST, token, _beat())
    with pytest.raises(RequestError) as refused:
        agent.heartbeat(svc, node.uuid, LATEST, token, _beat("https://10.0.0.6:9999"))
    assert refused.value.status == 400
    assert "does not match" in refused.value.message
    stored = _session(svc, node)
    assert stored is not None
    assert stored.agent_url == URL
