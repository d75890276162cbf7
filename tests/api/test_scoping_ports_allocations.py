"""Project scoping of ports and allocations, as Ironic's secure-RBAC defaults have it.

Nodes are enrolled by the system administrator: ``n-owned`` owned by
``p-owner`` and leased to ``p-lessee``, ``n-other`` owned by ``p-other``,
``n-free`` owned by nobody; each has one port. The personas of
``tests/support/auth.py`` then look at them: a project sees the ports of the
nodes it owns or leases and the allocations it owns; what it may not see is
answered as missing (404, or 400 inside a request body), what it may see but
not change is 403.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import create_node, error_text, make_available
from tests.support.auth import (
    ADMIN,
    LESSEE_ADMIN,
    LESSEE_MEMBER,
    MEMBER,
    NO_ROLE,
    OTHER_ADMIN,
    OWNER_ADMIN,
    OWNER_MEMBER,
    OWNER_READER,
    READER,
    Persona,
    basic_auth_settings,
)
from tests.support.stack import Stack, start_stack

MACS = {
    "n-owned": "52:54:00:0a:00:01",
    "n-other": "52:54:00:0a:00:02",
    "n-free": "52:54:00:0a:00:03",
}


def denied(rule: str) -> str:
    return f"Access was denied to the following resource: {rule}"


@pytest.fixture
def stack(sqlite_url: str, tmp_path: Path) -> Iterator[Stack]:
    running = start_stack(basic_auth_settings(sqlite_url, tmp_path))
    # Requests without a persona's headers (the tests.support.api helpers) are
    # the system administrator's.
    running.client.headers.update(ADMIN.headers)
    try:
        yield running
    finally:
        running.stop()


def _port(client: TestClient, node: str, address: str, who: Persona = ADMIN) -> Any:
    return client.post(
        "/v1/ports", json={"address": address, "node_uuid": node}, headers=who.headers
    )


@pytest.fixture
def nodes(stack: Stack) -> dict[str, dict[str, Any]]:
    """The three nodes (by name) and one port on each."""
    client = stack.client
    made = {
        "n-owned": create_node(
            client, name="n-owned", owner="p-owner", lessee="p-lessee", shard="s1"
        ),
        "n-other": create_node(client, name="n-other", owner="p-other", shard="s1"),
        "n-free": create_node(client, name="n-free", shard="s1"),
    }
    for name, node in made.items():
        response = _port(client, node["uuid"], MACS[name])
        assert response.status_code == 201, response.text
        node["port"] = response.json()["uuid"]
    return made


def _addresses(client: TestClient, who: Persona, path: str = "/v1/ports") -> set[str]:
    response = client.get(path, headers=who.headers)
    assert response.status_code == 200, response.text
    return {p["address"] for p in response.json()["ports"]}


# -- ports ----------------------------------------------------------------------


def test_port_lists_show_the_ports_of_owned_and_leased_nodes(
    stack: Stack, nodes: dict[str, Any]
) -> None:
    client = stack.client
    everything = set(MACS.values())
    for who in (ADMIN, READER, MEMBER):
        assert _addresses(client, who) == everything, who.name
        assert _addresses(client, who, "/v1/ports/detail") == everything, who.name
    for who in (OWNER_ADMIN, OWNER_MEMBER, OWNER_READER, LESSEE_ADMIN, LESSEE_MEMBER):
        assert _addresses(client, who) == {MACS["n-owned"]}, who.name
        assert _addresses(client, who, "/v1/ports/detail") == {MACS["n-owned"]}, who.name
    assert _addresses(client, OTHER_ADMIN) == {MACS["n-other"]}
    # Filters combine with the project's limit (the shard filter joins the nodes too).
    assert _addresses(client, OWNER_READER, "/v1/ports?shard=s1") == {MACS["n-owned"]}
    assert _addresses(client, ADMIN, "/v1/ports?shard=s1") == everything
    other_mac = MACS["n-other"].replace(":", "%3A")
    assert _addresses(client, OWNER_READER, f"/v1/ports?address={other_mac}") == set()
    response = client.get("/v1/ports", headers=NO_ROLE.headers)
    assert response.status_code == 403
    assert error_text(response) == denied("baremetal:port:list_all")


def test_port_list_by_a_hidden_node_is_not_found(stack: Stack, nodes: dict[str, Any]) -> None:
    client = stack.client
    for param in ("node", "node_uuid"):
        for ident in ("n-other", nodes["n-other"]["uuid"]):
            if param == "node_uuid" and ident == "n-other":
                continue
            url = f"/v1/ports?{param}={ident}"
            response = client.get(url, headers=OWNER_MEMBER.headers)
            assert response.status_code == 404, (url, response.text)
            assert error_text(response) == f"Node {ident} could not be found."
            shown = client.get(url, headers=ADMIN.headers)
            assert shown.status_code == 200, shown.text
            assert [p["address"] for p in shown.json()["ports"]] == [MACS["n-other"]]
    assert _addresses(client, LESSEE_MEMBER, "/v1/ports?node=n-owned") == {MACS["n-owned"]}
    assert _addresses(client, OWNER_READER, "/v1/ports/detail?node=n-owned") == {MACS["n-owned"]}
    response = client.get("/v1/ports/detail?node=n-free", headers=OWNER_READER.headers)
    assert response.status_code == 404
    assert error_text(response) == "Node n-free could not be found."


def test_single_ports_of_other_projects_are_not_found(stack: Stack, nodes: dict[str, Any]) -> None:
    client = stack.client
    port = nodes["n-owned"]["port"]
    extra = [{"op": "add", "path": "/extra/k", "value": "v"}]
    # Another project: the port does not exist, whatever it asks.
    for method, body in (("GET", None), ("PATCH", extra), ("DELETE", None)):
        response = client.request(
            method, f"/v1/ports/{port}", json=body, headers=OTHER_ADMIN.headers
        )
        assert response.status_code == 404, (method, response.text)
        assert error_text(response) == f"Port {port} could not be found."
    # Readable by the lessee, but only the owner's administrators change it.
    assert client.get(f"/v1/ports/{port}", headers=LESSEE_MEMBER.headers).status_code == 200
    for who in (LESSEE_ADMIN, LESSEE_MEMBER, OWNER_MEMBER, OWNER_READER):
        response = client.patch(f"/v1/ports/{port}", json=extra, headers=who.headers)
        assert response.status_code == 403, (who.name, response.text)
        assert error_text(response) == denied("baremetal:port:update")
        response = client.delete(f"/v1/ports/{port}", headers=who.headers)
        assert response.status_code == 403, (who.name, response.text)
        assert error_text(response) == denied("baremetal:port:delete")
    response = client.patch(f"/v1/ports/{port}", json=extra, headers=OWNER_ADMIN.headers)
    assert response.status_code == 200, response.text
    assert response.json()["extra"] == {"k": "v"}
    assert client.delete(f"/v1/ports/{port}", headers=OWNER_ADMIN.headers).status_code == 204
    assert client.get(f"/v1/ports/{port}", headers=ADMIN.headers).status_code == 404


def test_port_create_is_checked_on_the_node_before_it_is_looked_for(
    stack: Stack, nodes: dict[str, Any]
) -> None:
    client = stack.client
    owned, other = nodes["n-owned"]["uuid"], nodes["n-other"]["uuid"]
    missing = "1be26c0b-03f2-4d23-9c0f-000000000000"
    for who, node in (
        (OWNER_MEMBER, owned),
        (OWNER_READER, owned),
        (LESSEE_ADMIN, owned),
        (NO_ROLE, owned),
        # A node the project may not see, and one that does not exist, are
        # refused alike: the answer says nothing about which one exists.
        (OWNER_ADMIN, other),
        (OWNER_ADMIN, missing),
    ):
        response = _port(client, node, "52:54:00:0b:00:01", who)
        assert response.status_code == 403, (who.name, node, response.text)
        assert error_text(response) == denied("baremetal:port:create")
    response = _port(client, missing, "52:54:00:0b:00:01", ADMIN)
    assert response.status_code == 400, response.text
    assert error_text(response) == f"Node {missing} could not be found."
    response = _port(client, owned, "52:54:00:0b:00:01", OWNER_ADMIN)
    assert response.status_code == 201, response.text
    assert response.json()["node_uuid"] == owned
    created = client.post(
        "/v1/ports",
        json={"address": "52:54:00:0b:00:02", "node_ident": "n-owned"},
        headers=OWNER_ADMIN.headers,
    )
    assert created.status_code == 201, created.text
    assert _addresses(client, OWNER_READER) == {
        MACS["n-owned"],
        "52:54:00:0b:00:01",
        "52:54:00:0b:00:02",
    }
    assert _addresses(client, OTHER_ADMIN) == {MACS["n-other"]}


def test_a_port_moves_only_between_nodes_of_one_owner(stack: Stack, nodes: dict[str, Any]) -> None:
    client = stack.client
    second = create_node(client, name="n-owned-2", owner="p-owner")
    # Leased to p-owner, so p-owner sees it, but p-other owns it.
    leased = create_node(client, name="n-leased", owner="p-other", lessee="p-owner")
    port = nodes["n-owned"]["port"]

    def move(node: str, who: Persona) -> Any:
        patch = [{"op": "replace", "path": "/node_uuid", "value": node}]
        return client.patch(f"/v1/ports/{port}", json=patch, headers=who.headers)

    response = move(nodes["n-other"]["uuid"], OWNER_ADMIN)
    assert response.status_code == 400, response.text
    assert error_text(response) == f"Node {nodes['n-other']['uuid']} could not be found."
    for who, node in ((OWNER_ADMIN, leased["uuid"]), (ADMIN, nodes["n-free"]["uuid"])):
        response = move(node, who)
        assert response.status_code == 400, (who.name, response.text)
        assert error_text(response) == (
            f"Unable to apply the requested node_uuid '{node}'. Requested value was invalid."
        )
    shown = client.get(f"/v1/ports/{port}", headers=ADMIN.headers).json()
    assert shown["node_uuid"] == nodes["n-owned"]["uuid"]
    response = move(second["uuid"], OWNER_ADMIN)
    assert response.status_code == 200, response.text
    assert response.json()["node_uuid"] == second["uuid"]
    # n-owned-2 is not leased: the lessee no longer sees the port.
    assert _addresses(client, LESSEE_MEMBER) == set()
    response = move(nodes["n-owned"]["uuid"], ADMIN)
    assert response.status_code == 200, response.text
    assert _addresses(client, LESSEE_MEMBER) == {MACS["n-owned"]}


# -- allocations ----------------------------------------------------------------


def _allocate(client: TestClient, who: Persona, **body: Any) -> Any:
    return client.post("/v1/allocations", json=body, headers=who.headers)


def _settled(client: TestClient, ident: str, timeout: float = 20.0) -> dict[str, Any]:
    """The allocation once the conductor has processed it."""
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(f"/v1/allocations/{ident}", headers=ADMIN.headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if body["state"] != "allocating":
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"allocation {ident} is still allocating")
        time.sleep(0.05)


def _listed(client: TestClient, who: Persona, query: str = "") -> set[str]:
    response = client.get(f"/v1/allocations{query}", headers=who.headers)
    assert response.status_code == 200, response.text
    return {a["uuid"] for a in response.json()["allocations"]}


def test_allocation_lists_are_limited_to_the_project(stack: Stack, nodes: dict[str, Any]) -> None:
    client = stack.client
    made = {}
    for owner in ("p-owner", "p-other", None):
        response = _allocate(client, ADMIN, resource_class="nothing-has-it", owner=owner)
        assert response.status_code == 201, response.text
        assert response.json()["owner"] == owner
        made[owner] = response.json()["uuid"]
    everything = set(made.values())
    assert _listed(client, ADMIN) == everything
    assert _listed(client, READER) == everything
    assert _listed(client, ADMIN, "?owner=p-other") == {made["p-other"]}
    for who in (OWNER_ADMIN, OWNER_MEMBER, OWNER_READER):
        assert _listed(client, who) == {made["p-owner"]}, who.name
        assert _listed(client, who, "?owner=p-owner") == {made["p-owner"]}, who.name
    # The lessee of the owner's node does not see the owner's allocations.
    assert _listed(client, LESSEE_MEMBER) == set()
    assert _listed(client, OTHER_ADMIN) == {made["p-other"]}
    for who, query in ((OWNER_READER, "?owner=p-other"), (LESSEE_ADMIN, "?owner=p-owner")):
        response = client.get(f"/v1/allocations{query}", headers=who.headers)
        assert response.status_code == 403, response.text
        assert error_text(response) == denied("baremetal:allocation:list_all")
    response = client.get("/v1/allocations", headers=NO_ROLE.headers)
    assert response.status_code == 403
    # A node the caller may not see is a missing one (seed 004: a 400, the same
    # answer as for a node that does not exist); a visible one filters.
    response = client.get("/v1/allocations?node=n-other", headers=OWNER_READER.headers)
    assert response.status_code == 400, response.text
    assert error_text(response) == "Node n-other could not be found."
    assert _listed(client, OWNER_READER, "?node=n-owned") == set()
    assert _listed(client, ADMIN, "?node=n-other") == set()


def test_a_project_creates_allocations_for_itself(stack: Stack, nodes: dict[str, Any]) -> None:
    client = stack.client
    response = _allocate(client, OWNER_MEMBER, resource_class="rc")
    assert response.status_code == 201, response.text
    assert response.json()["owner"] == "p-owner"
    response = _allocate(client, OWNER_MEMBER, resource_class="rc", owner="p-owner")
    assert response.status_code == 201, response.text
    assert response.json()["owner"] == "p-owner"
    response = _allocate(client, OWNER_MEMBER, resource_class="rc", owner="p-other")
    assert response.status_code == 403, response.text
    assert error_text(response) == (
        "Cannot create allocation with an owner Project ID value p-other not matching the "
        "requester Project ID p-owner. Policy baremetal:allocation:create_restricted is "
        "required for this capability."
    )
    # Readers may not create; naming another project is refused on the first rule.
    response = _allocate(client, OWNER_READER, resource_class="rc")
    assert response.status_code == 403, response.text
    assert error_text(response) == denied("baremetal:allocation:create_restricted")
    response = _allocate(client, OWNER_READER, resource_class="rc", owner="p-other")
    assert response.status_code == 403, response.text
    assert error_text(response) == denied("baremetal:allocation:create")
    response = _allocate(client, NO_ROLE, resource_class="rc")
    assert response.status_code == 403, response.text
    # The system keeps the owner it is given, or none.
    response = _allocate(client, ADMIN, resource_class="rc", owner="p-other")
    assert response.status_code == 201, response.text
    assert response.json()["owner"] == "p-other"
    response = _allocate(client, MEMBER, resource_class="rc")
    assert response.status_code == 201, response.text
    assert response.json()["owner"] is None
    assert len(_listed(client, OWNER_READER)) == 2


def test_candidate_nodes_are_the_projects_own(stack: Stack, nodes: dict[str, Any]) -> None:
    client = stack.client
    for who, candidate in (
        (OWNER_MEMBER, "n-other"),
        (OWNER_MEMBER, "n-free"),
        (LESSEE_MEMBER, nodes["n-other"]["uuid"]),
        (OTHER_ADMIN, "n-owned"),
    ):
        response = _allocate(client, who, resource_class="rc", candidate_nodes=[candidate])
        assert response.status_code == 400, (who.name, response.text)
        assert error_text(response) == f"Nodes cannot be found: {candidate}"
    for who in (OWNER_MEMBER, LESSEE_MEMBER):
        response = _allocate(client, who, resource_class="rc", candidate_nodes=["n-owned"])
        assert response.status_code == 201, (who.name, response.text)
        assert response.json()["candidate_nodes"] == [nodes["n-owned"]["uuid"]]
    response = _allocate(client, ADMIN, resource_class="rc", candidate_nodes=["n-other"])
    assert response.status_code == 201, response.text


def test_an_owned_allocation_takes_only_nodes_its_project_owns_or_leases(stack: Stack) -> None:
    client = stack.client
    leased = make_available(
        client, name="gold-leased", resource_class="gold", owner="p-other", lessee="p-lessee"
    )
    make_available(client, name="gold-other", resource_class="gold", owner="p-other")
    # Either node matches the resource class; the lessee's allocation must
    # take the one it leases, and then find none it may have.
    first = _allocate(client, LESSEE_MEMBER, resource_class="gold")
    assert first.status_code == 201, first.text
    done = _settled(client, first.json()["uuid"])
    assert done["state"] == "active", done
    assert done["node_uuid"] == leased["uuid"]
    assert done["owner"] == "p-lessee"
    second = _allocate(client, LESSEE_MEMBER, resource_class="gold")
    assert second.status_code == 201, second.text
    failed = _settled(client, second.json()["uuid"])
    assert failed["state"] == "error", failed
    assert "belong to owner p-lessee" in failed["last_error"]
    # An allocation without an owner (the system's) may take any node.
    third = _allocate(client, ADMIN, resource_class="gold")
    assert third.status_code == 201, third.text
    assert _settled(client, third.json()["uuid"])["state"] == "active"


def test_node_allocation_is_hidden_with_the_node_and_guarded_by_its_owner(stack: Stack) -> None:
    client = stack.client
    node = make_available(
        client, name="n-alloc", resource_class="silver", owner="p-owner", lessee="p-lessee"
    )
    made = _allocate(client, ADMIN, resource_class="silver", candidate_nodes=["n-alloc"])
    assert made.status_code == 201, made.text
    system_owned = _settled(client, made.json()["uuid"])
    assert system_owned["node_uuid"] == node["uuid"], system_owned
    url = "/v1/nodes/n-alloc/allocation"
    # Another project: the node, so its allocation, does not exist.
    for method in ("GET", "DELETE"):
        response = client.request(method, url, headers=OTHER_ADMIN.headers)
        assert response.status_code == 404, (method, response.text)
        assert error_text(response) == "Node n-alloc could not be found."
    # The node's projects see it, but not an allocation owned by nobody: to them
    # the node has none (a 403 would tell that one exists).
    absent = f"Node {node['uuid']} is not associated with any allocation."
    for who in (OWNER_MEMBER, LESSEE_MEMBER):
        for method in ("GET", "DELETE"):
            response = client.request(method, url, headers=who.headers)
            assert response.status_code == 404, (who.name, method, response.text)
            assert error_text(response) == absent
    shown = client.get(url, headers=READER.headers)
    assert shown.status_code == 200, shown.text
    assert shown.json()["uuid"] == system_owned["uuid"]
    assert client.delete(url, headers=ADMIN.headers).status_code == 204

    # The lessee's own allocation of the node: the lessee's, not the owner's.
    made = _allocate(client, LESSEE_MEMBER, resource_class="silver", candidate_nodes=["n-alloc"])
    assert made.status_code == 201, made.text
    leased = _settled(client, made.json()["uuid"])
    assert leased["node_uuid"] == node["uuid"], leased
    assert leased["owner"] == "p-lessee"
    response = client.get(url, headers=OWNER_MEMBER.headers)
    assert response.status_code == 404, response.text
    assert error_text(response) == absent
    assert client.delete(url, headers=OWNER_MEMBER.headers).status_code == 404
    response = client.get(url, headers=LESSEE_MEMBER.headers)
    assert response.status_code == 200, response.text
    assert response.json()["uuid"] == leased["uuid"]
    assert _listed(client, LESSEE_MEMBER, "?node=n-alloc") == {leased["uuid"]}
    assert _listed(client, OWNER_MEMBER, "?node=n-alloc") == set()
    assert client.delete(url, headers=LESSEE_MEMBER.headers).status_code == 204
    assert client.get(url, headers=ADMIN.headers).status_code == 404


def test_backfilling_a_hidden_node_is_a_bad_request(stack: Stack, nodes: dict[str, Any]) -> None:
    client = stack.client
    for ident in ("n-other", "n-free", "no-such-node"):
        response = _allocate(client, OWNER_MEMBER, node=ident)
        assert response.status_code == 400, (ident, response.text)
        assert error_text(response) == f"Node {ident} could not be found."
    # The system sees n-other: refused for what it is (not deployed) instead.
    response = _allocate(client, ADMIN, node="n-other")
    assert response.status_code == 400, response.text
    assert "backfilling needs an active node" in error_text(response)
    response = _allocate(client, OWNER_MEMBER, node="n-owned")
    assert response.status_code == 400, response.text
    assert "backfilling needs an active node" in error_text(response)
