"""The ironic-inspector API: versions, error shape, paging, the ramdisk's callback, and who
may call each route."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import update

from metalforge import inspection_states as ins
from metalforge.api.auth.access import Guard
from metalforge.api.auth.identity import Identity
from metalforge.api.auth.policy import Policy
from metalforge.api.inspector import routes, rules
from metalforge.api.inspector.app import PUBLIC_PATHS, create_inspector_app
from metalforge.db import introspections
from metalforge.db.models import Node
from tests.support.api import LATEST, create_node, provision, wait_for_state
from tests.support.auth import ADMIN, PERSONAS, Persona, basic_auth_settings
from tests.support.stack import Stack, start_stack

MIN = "x-openstack-ironic-inspector-api-minimum-version"
MAX = "x-openstack-ironic-inspector-api-maximum-version"


@pytest.fixture
def inspector(stack: Stack) -> TestClient:
    # A POST another site's page could send is refused: a client says it sends JSON.
    json_client = {"Content-Type": "application/json"}
    return TestClient(create_inspector_app(stack.app.state.services), headers=json_client)


def _inspected(stack: Stack, **fields: Any) -> dict[str, Any]:
    node = create_node(stack.client, **fields)
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    return wait_for_state(stack.client, node["uuid"], "manageable")


def _message(response: Any) -> str:
    body = response.json()
    assert set(body) == {"error"}, body
    return str(body["error"]["message"])


def test_version_discovery_and_headers(inspector: TestClient) -> None:
    root = inspector.get("/")
    assert root.status_code == 200
    assert root.json()["versions"][0]["id"] == "1.18"
    assert (root.headers[MIN], root.headers[MAX]) == ("1.0", "1.18")
    v1 = inspector.get("/v1")
    assert {r["name"] for r in v1.json()["resources"]} == {"introspection", "continue", "rules"}


@pytest.mark.parametrize(
    ("value", "status", "text"),
    [("1.19", 406, "supported range is 1.0 to 1.18"), ("one", 400, "Malformed API version")],
)
def test_bad_versions(inspector: TestClient, value: str, status: int, text: str) -> None:
    response = inspector.get(
        "/v1/introspection", headers={"X-OpenStack-Ironic-Inspector-API-Version": value}
    )
    assert response.status_code == status
    assert text in _message(response)
    assert response.headers[MAX] == "1.18"


def test_unknown_node_and_unknown_path(inspector: TestClient) -> None:
    unknown = uuid.uuid4()
    missing = inspector.get(f"/v1/introspection/{unknown}")
    assert missing.status_code == 404
    assert _message(missing) == f"Could not find node {unknown} in cache"
    nowhere = inspector.get("/v2/anything")
    assert nowhere.status_code == 404
    assert nowhere.headers[MAX] == "1.18"
    _message(nowhere)


def test_status_list_paging_and_filters(stack: Stack, inspector: TestClient) -> None:
    first = _inspected(stack)
    second = _inspected(stack)
    status = inspector.get(f"/v1/introspection/{first['uuid']}").json()
    assert status["state"] == "finished"
    assert status["finished"] is True
    assert status["links"][0]["href"].endswith(f"/v1/introspection/{first['uuid']}")
    assert not status["started_at"].endswith("Z")
    listed = inspector.get("/v1/introspection").json()["introspection"]
    assert [r["uuid"] for r in listed] == [second["uuid"], first["uuid"]]  # newest first
    page = inspector.get("/v1/introspection?limit=1").json()["introspection"]
    assert [r["uuid"] for r in page] == [second["uuid"]]
    rest = inspector.get(f"/v1/introspection?limit=1&marker={second['uuid']}").json()
    assert [r["uuid"] for r in rest["introspection"]] == [first["uuid"]]
    assert inspector.get("/v1/introspection?state=error").json()["introspection"] == []
    for query, text in (
        ("marker=not-a-uuid", "Marker not UUID-like"),
        ("limit=-1", "limit"),
        ("limit=abc", "limit"),
        ("state=sleeping", "unknown state"),
    ):
        response = inspector.get(f"/v1/introspection?{query}")
        assert response.status_code == 400, query
        assert text in _message(response)
    unknown = inspector.get(f"/v1/introspection?marker={uuid.uuid4()}")
    assert unknown.status_code == 404


def test_the_ramdisk_callback_answers_200_with_the_uuid(
    stack: Stack, inspector: TestClient
) -> None:
    mac = "52:54:00:77:00:01"
    node = create_node(stack.client, driver_info={"fake_step_delay": 3600})
    port = stack.client.post(
        "/v1/ports",
        json={"address": mac, "node_uuid": node["uuid"]},
        headers={"X-OpenStack-Ironic-API-Version": "latest"},
    )
    assert port.status_code == 201
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    assert inspector.post(f"/v1/introspection/{node['uuid']}").status_code == 202
    wait_for_state(stack.client, node["uuid"], "inspect wait")
    report = {
        "inventory": {
            "interfaces": [{"name": "eth0", "mac_address": mac}],
            "cpu": {"count": 2, "architecture": "x86_64"},
            "memory": {"physical_mb": 4096},
            "disks": [],
        }
    }
    response = inspector.post("/v1/continue", json=report)
    assert response.status_code == 200, response.text
    assert response.json() == {"uuid": node["uuid"]}
    wait_for_state(stack.client, node["uuid"], "manageable")
    bad = inspector.post("/v1/continue", json=[1])
    assert bad.status_code == 400
    assert _message(bad) == "Invalid data: expected a JSON object, got list"


HOOKS = "The following failures happened during running pre-processing hooks:"


def test_answers_in_ironic_inspectors_words(stack: Stack, inspector: TestClient) -> None:
    """What ``tools/inspector_oracle.py`` found ironic-inspector 12.5 answering."""
    unknown = str(uuid.uuid4())
    expected = {
        ("POST", f"/v1/introspection/{unknown}"): f"Node {unknown} was not found in Ironic",
        ("GET", f"/v1/introspection/{unknown}"): f"Could not find node {unknown} in cache",
        ("POST", f"/v1/introspection/{unknown}/abort"): f"Could not find node {unknown} in cache",
        ("GET", f"/v1/introspection/{unknown}/data"): (
            f"Introspection data not found for node {unknown}, processed=True"
        ),
    }
    for (method, path), text in expected.items():
        answer = inspector.request(method, path)
        assert (answer.status_code, _message(answer)) == (404, text), path

    mac = "52:54:00:77:00:09"
    node = create_node(stack.client, driver_info={"fake_step_delay": 3600})
    uuid_ = node["uuid"]
    made = stack.client.post("/v1/ports", json={"address": mac, "node_uuid": uuid_}, headers=LATEST)
    assert made.status_code == 201
    assert provision(stack.client, uuid_, "manage").status_code == 202
    wait_for_state(stack.client, uuid_, "manageable")
    never = inspector.post(f"/v1/introspection/{uuid_}/data/unprocessed")
    assert (never.status_code, _message(never)) == (
        404,
        f"Introspection data not found for node {uuid_}, processed=False",
    )
    listed = inspector.post(f"/v1/introspection/{uuid_}/data/unprocessed", json=[1])
    assert _message(listed) == "Invalid data: expected a JSON object, got list"

    # A report nobody waits for: the 400 names what was looked up.
    inventory = {"interfaces": [{"name": "eth0", "mac_address": mac}], "bmc_address": "192.0.2.7"}
    stray = {"inventory": inventory}
    refused = inspector.post("/v1/continue", json=stray)
    assert (refused.status_code, _message(refused)) == (
        400,
        f"{HOOKS}\nLook up error: Could not find a node for attributes "
        f"{{'bmc_address': ['192.0.2.7'], 'mac': ['{mac}']}}",
    )
    empty = inspector.post("/v1/continue", json={"x": 1})
    assert _message(empty).startswith(f"{HOOKS}\nPreprocessing hook validate_interfaces")

    # Finished, then started again: its data is gone from this API until the new
    # report (ironic-inspector deletes it at the start), and a reapply finds none.
    assert inspector.post(f"/v1/introspection/{uuid_}?manage_boot=false").status_code == 202
    wait_for_state(stack.client, uuid_, "inspect wait")
    hardware = {"cpu": {"count": 1, "architecture": "x86_64"}, "memory": {"physical_mb": 2048}}
    report = {"inventory": {**inventory, **hardware}}
    assert inspector.post("/v1/continue", json=report).status_code == 200
    wait_for_state(stack.client, uuid_, "manageable")
    assert inspector.get(f"/v1/introspection/{uuid_}/data").status_code == 200
    assert inspector.post(f"/v1/introspection/{uuid_}?manage_boot=false").status_code == 202
    wait_for_state(stack.client, uuid_, "inspect wait")
    hidden = inspector.get(f"/v1/introspection/{uuid_}/data")
    assert (hidden.status_code, _message(hidden)) == (
        404,
        f"Introspection data not found for node {uuid_}, processed=True",
    )
    assert inspector.post(f"/v1/introspection/{uuid_}/data/unprocessed").status_code == 404
    # Ironic's API still shows the inventory it has.
    kept = stack.client.get(f"/v1/nodes/{uuid_}/inventory", headers=LATEST)
    assert kept.status_code == 200


def test_start_refusals(stack: Stack, inspector: TestClient) -> None:
    enrolled = create_node(stack.client)
    refused = inspector.post(f"/v1/introspection/{enrolled['uuid']}")
    assert refused.status_code == 400
    assert _message(refused) == (
        'Invalid provision state for introspection: "enroll", valid states are '
        "\"['manageable', 'inspect failed', 'inspecting']\""
    )
    boolean = inspector.post(f"/v1/introspection/{enrolled['uuid']}?manage_boot=maybe")
    assert boolean.status_code == 400


# -- authorization -----------------------------------------------------------------
POLICY = Policy()


@pytest.fixture(scope="module")
def authz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, TestClient]]:
    tmp: Path = tmp_path_factory.mktemp("inspector-authz")
    running = start_stack(basic_auth_settings(f"sqlite:///{tmp}/mf.sqlite", tmp))
    try:
        yield running, TestClient(create_inspector_app(running.app.state.services))
    finally:
        running.stop()


def _routes() -> list[tuple[str, str, APIRoute]]:
    found = []
    for route in [*routes.router.routes, *rules.router.routes]:
        assert isinstance(route, APIRoute)
        assert route.methods is not None
        for method in route.methods:
            found.append((method, route.path, route))
    return found


def _guard(route: APIRoute) -> Guard | None:
    guards = [d.dependency for d in route.dependencies if isinstance(d.dependency, Guard)]
    assert len(guards) <= 1
    return guards[0] if guards else None


def test_every_route_is_public_or_guarded() -> None:
    for method, path, route in _routes():
        if path in PUBLIC_PATHS:
            assert _guard(route) is None, f"{method} {path} is public but guarded"
        else:
            assert _guard(route) is not None, f"{method} {path} has no guard"


def _persona_headers(persona: Persona) -> dict[str, str]:
    # The inspector's version header, as its client sends it (never Ironic's).
    version = {"X-OpenStack-Ironic-Inspector-API-Version": "1.18"}
    return {"Authorization": persona.headers["Authorization"], **version}


GUARDED = [(m, p, r) for m, p, r in _routes() if p not in PUBLIC_PATHS]


@pytest.mark.parametrize(
    ("method", "path", "route"), GUARDED, ids=[f"{m} {p}" for m, p, _ in GUARDED]
)
def test_each_persona_gets_what_the_policy_says(
    authz: tuple[Stack, TestClient], method: str, path: str, route: APIRoute
) -> None:
    stack, client = authz
    guard = _guard(route)
    assert guard is not None
    created = stack.client.post(
        "/v1/nodes", json={"driver": "fake-hardware"}, headers=ADMIN.headers
    )
    assert created.status_code == 201, created.text
    node = created.json()["uuid"]
    url = path.replace("{node_id}", node)
    failures = []
    for persona in PERSONAS:
        caller = Identity(
            user=persona.name, roles=frozenset(persona.roles), project_id=persona.project_id
        )
        allowed = POLICY.allows(guard.rule, caller)
        response = client.request(method, url, headers=_persona_headers(persona))
        if allowed == (response.status_code in (401, 403)):
            failures.append(f"{persona.name}: allowed={allowed}, got {response.status_code}")
        if not allowed and "message" not in json.loads(response.text).get("error", {}):
            failures.append(f"{persona.name}: refusal not in the inspector's shape")
    assert not failures, "\n".join(failures)


def test_without_credentials_guarded_routes_are_401(authz: tuple[Stack, TestClient]) -> None:
    _, client = authz
    for method, path, _ in GUARDED:
        response = client.request(method, path.replace("{node_id}", str(uuid.uuid4())))
        assert response.status_code == 401, (method, path)
        assert "message" in response.json()["error"]
    assert client.get("/").status_code == 200
    assert client.post("/v1/continue", json={}).status_code == 400  # public, then refused


def test_start_while_inspecting_repeats_only_a_start(stack: Stack, inspector: TestClient) -> None:
    node = create_node(stack.client)
    with stack.db.write() as session:
        session.execute(
            update(Node).where(Node.uuid == node["uuid"]).values(provision_state="inspecting")
        )
        introspections.save(session, introspections.Record(node["uuid"], ins.PROCESSING, 1))
    refused = inspector.post(f"/v1/introspection/{node['uuid']}")
    assert refused.status_code == 400
    assert "Invalid state for introspection: processing" in _message(refused)
    with stack.db.write() as session:
        introspections.save(session, introspections.Record(node["uuid"], ins.STARTING, 1))
    assert inspector.post(f"/v1/introspection/{node['uuid']}").status_code == 202


def test_a_post_another_site_could_send_starts_nothing(stack: Stack, inspector: TestClient) -> None:
    node = create_node(stack.client)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for path in (f"/v1/introspection/{node['uuid']}", f"/v1/introspection/{node['uuid']}/abort"):
        refused = inspector.post(path, headers=form)
        assert refused.status_code == 415, refused.text
        assert "could come from another site's page" in _message(refused)
    evil = {"Origin": "https://evil.example", "X-OpenStack-Ironic-Inspector-API-Version": "1.18"}
    refused = inspector.post(f"/v1/introspection/{node['uuid']}", headers=evil)
    assert refused.status_code == 403, refused.text
    assert inspector.get(f"/v1/introspection/{node['uuid']}").status_code == 404
