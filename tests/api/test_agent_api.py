"""The ramdisk agent's routes: lookup (token issued once), heartbeat (token, pinned URL).

The conductor is not started: the node is put in the state under test
directly, so nothing moves it while the agent's calls are checked. The
agent's side of the protocol is exercised by the real ironic-python-agent in
tests/lab.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx2 import Response
from sqlalchemy import select, text

from metalforge.config import load_settings
from metalforge.db import agent_sessions
from metalforge.db import tallies as db_tallies
from metalforge.db.models import WorkItem
from metalforge.serving import listening_sockets
from metalforge.startup import StartupError
from metalforge.states import AVAILABLE, CLEAN_WAIT
from tests.support.api import LATEST, create_node, error_text, version
from tests.support.stack import Stack, start_stack
from tests.support.stack import test_settings as stack_settings

MAC = "52:54:00:12:34:56"
AGENT = {"X-OpenStack-Ironic-API-Version": "1.68"}


@pytest.fixture
def idle_stack(db_url: str) -> Iterator[Stack]:
    running = start_stack(stack_settings(db_url), start_conductor=False)
    try:
        yield running
    finally:
        running.stop()


def _node_in(stack: Stack, state: str, mac: str = MAC, *, booted: bool = True) -> dict[str, Any]:
    """A node in ``state``; ``booted``: as if a conductor had just booted its ramdisk."""
    node = create_node(stack.client, name="agent-node")
    response = stack.client.post(
        "/v1/ports", json={"node_uuid": node["uuid"], "address": mac}, headers=LATEST
    )
    assert response.status_code == 201, response.text
    with stack.db.write() as session:
        session.execute(
            text("UPDATE nodes SET provision_state = :s WHERE uuid = :u"),
            {"s": state, "u": node["uuid"]},
        )
        if booted:
            node_id = session.execute(
                text("SELECT id FROM nodes WHERE uuid = :u"), {"u": node["uuid"]}
            ).scalar_one()
            agent_sessions.begin(session, node_id)
    return node


def _lookup(client: TestClient, query: str, headers: dict[str, str] = AGENT) -> Response:
    return client.get(f"/v1/lookup?{query}", headers=headers)


def test_first_lookup_gets_the_token_later_ones_see_it_masked(idle_stack: Stack) -> None:
    node = _node_in(idle_stack, CLEAN_WAIT)
    first = idle_stack.client.get(
        f"/v1/lookup?addresses={MAC.upper()},aa:bb:cc:dd:ee:ff", headers=AGENT
    )
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["node"]["uuid"] == node["uuid"]
    token = body["config"]["agent_token"]
    assert len(token) >= 32
    assert body["config"]["agent_token_required"] is True
    assert body["config"]["heartbeat_timeout"] == 300
    again = idle_stack.client.get(f"/v1/lookup?node_uuid={node['uuid']}", headers=AGENT)
    assert again.status_code == 200
    assert again.json()["config"]["agent_token"] == "******"


def test_a_lookup_below_1_62_leaves_the_token_for_the_agent(idle_stack: Stack) -> None:
    """An old client cannot receive the token, so it must not take it either."""
    node = _node_in(idle_stack, CLEAN_WAIT)
    old = _lookup(idle_stack.client, f"addresses={MAC}", version("1.61"))
    assert old.status_code == 200, old.text
    assert "agent_token" not in old.json()["config"]
    agent = _lookup(idle_stack.client, f"node_uuid={node['uuid']}")
    token = agent.json()["config"]["agent_token"]
    assert token != "******"
    assert len(token) >= 32


def test_a_lookup_naming_too_many_addresses_is_a_400(idle_stack: Stack) -> None:
    _node_in(idle_stack, CLEAN_WAIT)
    many = ",".join(f"52:54:00:00:{i // 256:02x}:{i % 256:02x}" for i in range(257))
    response = _lookup(idle_stack.client, f"addresses={many}")
    assert response.status_code == 400
    assert "at most 256" in error_text(response)
    fits = ",".join([MAC, *many.split(",")[:255]])
    assert _lookup(idle_stack.client, f"addresses={fits}").status_code == 200


def test_no_lookup_for_a_node_no_conductor_booted(idle_stack: Stack) -> None:
    """In a lookup state, but no ramdisk was booted by metalforge: no token for anyone."""
    _node_in(idle_stack, CLEAN_WAIT, booted=False)
    response = idle_stack.client.get(f"/v1/lookup?addresses={MAC}", headers=AGENT)
    assert response.status_code == 404
    with idle_stack.db.read() as session:
        assert session.execute(text("SELECT count(*) FROM agent_sessions")).scalar() == 0


def test_a_new_boot_voids_the_old_agents_token(idle_stack: Stack) -> None:
    node = _node_in(idle_stack, CLEAN_WAIT)
    token = _token(idle_stack)
    assert (
        _beat(idle_stack, node["uuid"], callback_url="http://a:9999", agent_token=token).status_code
        == 202
    )
    with idle_stack.db.write() as session:
        node_id = session.execute(text("SELECT id FROM nodes")).scalar_one()
        agent_sessions.begin(session, node_id)
    stale = _beat(idle_stack, node["uuid"], callback_url="http://a:9999", agent_token=token)
    assert stale.status_code == 400
    fresh = _token(idle_stack)
    assert fresh != token
    assert (
        _beat(idle_stack, node["uuid"], callback_url="http://b:9999", agent_token=fresh).status_code
        == 202
    )


def test_the_agents_certificate_is_pinned_for_the_boot(idle_stack: Stack) -> None:
    node = _node_in(idle_stack, CLEAN_WAIT)
    token = _token(idle_stack)
    url = "https://10.0.0.5:9999"
    first = _beat(
        idle_stack, node["uuid"], callback_url=url, agent_token=token, agent_verify_ca="A"
    )
    assert first.status_code == 202
    changed = _beat(
        idle_stack, node["uuid"], callback_url=url, agent_token=token, agent_verify_ca="B"
    )
    assert changed.status_code == 400
    assert "certificate changed" in error_text(changed)
    with idle_stack.db.read() as session:
        assert session.execute(text("SELECT verify_ca FROM agent_sessions")).scalar() == "A"


def test_lookup_refusals(idle_stack: Stack) -> None:
    _node_in(idle_stack, AVAILABLE)
    client = idle_stack.client
    missing = client.get("/v1/lookup", headers=AGENT)
    assert missing.status_code == 400
    assert "At least one of 'addresses' and 'node_uuid'" in error_text(missing)
    assert client.get(f"/v1/lookup?addresses={MAC}", headers=AGENT).status_code == 404, (
        "a node that is not booting a ramdisk must not be found"
    )
    assert client.get("/v1/lookup?addresses=00:00:00:00:00:01", headers=AGENT).status_code == 404
    assert client.get(f"/v1/lookup?addresses={MAC}", headers=version("1.21")).status_code == 404
    bad_uuid = client.get("/v1/lookup?node_uuid=not-a-uuid", headers=AGENT)
    assert bad_uuid.status_code == 400


def _token(stack: Stack) -> str:
    response = stack.client.get(f"/v1/lookup?addresses={MAC}", headers=AGENT)
    assert response.status_code == 200, response.text
    token: str = response.json()["config"]["agent_token"]
    return token


def _beat(stack: Stack, ident: object, **body: object) -> Response:
    return stack.client.post(f"/v1/heartbeat/{ident}", json=body, headers=AGENT)


def test_heartbeat_records_the_agent_and_wakes_the_conductor(idle_stack: Stack) -> None:
    node = _node_in(idle_stack, CLEAN_WAIT)
    token = _token(idle_stack)
    response = idle_stack.client.post(
        f"/v1/heartbeat/{node['uuid']}",
        json={
            "callback_url": "https://10.0.0.5:9999",
            "agent_token": token,
            "agent_version": "13.0.0",
            "agent_verify_ca": "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n",
        },
        headers=AGENT,
    )
    assert response.status_code == 202, response.text
    assert response.content == b""
    with idle_stack.db.read() as session:
        row = session.execute(text("SELECT agent_url, agent_version FROM agent_sessions")).one()
        assert tuple(row) == ("https://10.0.0.5:9999", "13.0.0")
        kinds = list(session.scalars(select(WorkItem.kind)))
    assert "provision" in kinds, "a heartbeat in clean wait must queue a check of the node"


def test_heartbeat_refusals_change_nothing(idle_stack: Stack) -> None:
    node = _node_in(idle_stack, CLEAN_WAIT)
    token = _token(idle_stack)
    url = "http://10.0.0.5:9999"
    cases: list[tuple[dict[str, object], int, str]] = [
        ({"callback_url": url}, 400, "Agent token is required"),
        ({"callback_url": url, "agent_token": "x" * 43}, 400, "Invalid or missing agent token"),
        ({"agent_token": token}, 400, "callback_url is required"),
        ({"callback_url": "ftp://x", "agent_token": token}, 400, "not an http(s) URL"),
        ({"callback_url": url, "agent_token": token, "bogus": 1}, 400, "bogus"),
        (
            {"callback_url": url, "agent_token": token, "agent_status": "dancing"},
            400,
            "Field agent_status is not accepted",
        ),
    ]
    for body, status, words in cases:
        response = _beat(idle_stack, node["uuid"], **body)
        assert response.status_code == status, (body, response.text)
        assert words in error_text(response), (body, error_text(response))
    with idle_stack.db.read() as session:
        assert session.execute(text("SELECT agent_url FROM agent_sessions")).scalar() is None
    assert _beat(idle_stack, node["uuid"], callback_url=url, agent_token=token).status_code == 202
    moved = _beat(idle_stack, node["uuid"], callback_url="http://10.0.0.6:9999", agent_token=token)
    assert moved.status_code == 400
    assert "does not match" in error_text(moved)
    too_old = idle_stack.client.post(
        f"/v1/heartbeat/{node['uuid']}",
        json={"callback_url": url, "agent_token": token, "agent_verify_ca": "pem"},
        headers=version("1.67"),
    )
    assert too_old.status_code == 400
    assert "agent_verify_ca" in error_text(too_old)
    newer = idle_stack.client.post(
        f"/v1/heartbeat/{node['uuid']}",
        json={"callback_url": url, "agent_token": token, "agent_status": "dancing"},
        headers=version("1.72"),
    )
    assert newer.status_code == 400
    assert "Unknown agent_status" in error_text(newer)
    too_long = _beat(
        idle_stack, node["uuid"], callback_url="http://x/" + "a" * 300, agent_token=token
    )
    assert too_long.status_code == 400
    unknown = _beat(
        idle_stack, "7b1c6e0e-6d0a-4f5e-9d3b-0c0f0f0f0f0f", callback_url=url, agent_token=token
    )
    assert unknown.status_code == 404


def test_agent_endpoint_serves_only_the_agents_routes(tmp_path: Path) -> None:
    settings = stack_settings(f"sqlite:///{tmp_path}/mf.sqlite")
    settings.api.agent_host = "10.251.0.1"
    settings.api.agent_port = 6390
    stack = start_stack(settings, start_conductor=False)
    try:
        assert stack.client.get("/v1/nodes", headers=LATEST).status_code == 200
        # Any socket but the operator API's serves only the agent's paths: the
        # agents' address, and an address nobody configured (fail closed).
        for base in ("http://10.251.0.1:6390", "http://[fd00::1]:6385", "http://localhost:6385"):
            agent_side = TestClient(stack.app, base_url=base)
            assert agent_side.get("/v1/nodes", headers=LATEST).status_code == 404, base
            assert agent_side.get("//v1/nodes", headers=LATEST).status_code == 404, base
            assert agent_side.get("/v1/heartbeat/../nodes", headers=LATEST).status_code == 404
            lookup = agent_side.get("/v1/lookup?addresses=" + MAC, headers=AGENT)
            assert lookup.status_code == 404, "no node is booting a ramdisk"
            assert "could not be found" in error_text(lookup)
            assert agent_side.get("/", headers=LATEST).status_code == 200
            assert agent_side.post("/v1/heartbeat/x", json={}, headers=AGENT).status_code == 400
    finally:
        stack.stop()


def test_a_wildcard_agents_endpoint_needs_its_own_port() -> None:
    settings = load_settings()
    settings.api.agent_host = "0.0.0.0"
    with pytest.raises(StartupError, match="own agent_port"):
        listening_sockets(settings)


def test_ramdisk_endpoints_can_be_left_to_the_agents_address_alone(tmp_path: Path) -> None:
    """``api.enable_ramdisk_endpoints = false``: the operator address refuses lookup,
    heartbeat and inspection reports as paths it does not serve; the agents' address
    serves them, and both still answer version discovery."""
    settings = stack_settings(f"sqlite:///{tmp_path}/mf.sqlite")
    settings.api.agent_host = "10.251.0.1"
    settings.api.agent_port = 6390
    settings.api.enable_ramdisk_endpoints = False
    stack = start_stack(settings, start_conductor=False)
    try:
        operator = stack.client
        assert operator.get("/v1/nodes", headers=LATEST).status_code == 200
        assert operator.get("/", headers=LATEST).status_code == 200
        refused = [
            operator.get("/v1/lookup?addresses=" + MAC, headers=AGENT),
            operator.post("/v1/heartbeat/x", json={}, headers=AGENT),
            operator.post("/v1/heartbeat", json={}, headers=AGENT),
            operator.post("/v1/continue_inspection", json={}),
        ]
        for response in refused:
            assert response.status_code == 404, response.text
            assert error_text(response) == "The resource could not be found."
        agent_side = TestClient(stack.app, base_url="http://10.251.0.1:6390")
        assert agent_side.post("/v1/heartbeat/x", json={}, headers=AGENT).status_code == 400
        assert agent_side.get("/v1", headers=LATEST).status_code == 200
    finally:
        stack.stop()


def _writes(stack: Stack) -> float:
    stack.db.flush_tally()
    with stack.db.snapshot() as connection:
        totals = {name: value for name, _labels, _part, value in db_tallies.totals(connection)}
    return totals.get("metalforge_db_write_transactions", 0.0)


def test_a_lookup_that_finds_nothing_writes_nothing(idle_stack: Stack) -> None:
    """Anything on the provisioning network may send lookups: one of unknown MACs is a
    read, so a flood of them does not queue the writers (on SQLite, one at a time)."""
    node = _node_in(idle_stack, CLEAN_WAIT)
    before = _writes(idle_stack)
    for number in range(20):
        assert (
            _lookup(idle_stack.client, f"addresses=52:54:00:77:00:{number:02x}").status_code == 404
        )
    assert _writes(idle_stack) == before
    assert _lookup(idle_stack.client, f"addresses={MAC}").status_code == 200
    assert _writes(idle_stack) == before + 1, "a lookup that finds its node writes its session"
    assert node["uuid"]
