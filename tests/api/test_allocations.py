"""The allocation API and its matching, on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import update

from metalforge.db.models import Node
from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    get_node,
    make_available,
    provision,
    version,
    wait_for_state,
)
from tests.support.stack import Stack


def _create(client: TestClient, **body: Any) -> Any:
    return client.post("/v1/allocations", json=body, headers=LATEST)


def _wait(client: TestClient, ident: str, timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = client.get(f"/v1/allocations/{ident}", headers=LATEST).json()
        if body["state"] != "allocating" or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def _allocate(client: TestClient, **body: Any) -> dict[str, Any]:
    response = _create(client, **body)
    assert response.status_code == 201, response.text
    assert response.json()["state"] == "allocating"
    return _wait(client, response.json()["uuid"])


def get_node_at(client: TestClient, ident: str, at: str) -> dict[str, Any]:
    body: dict[str, Any] = client.get(f"/v1/nodes/{ident}", headers=version(at)).json()
    return body


def _add_trait(client: TestClient, node: str, trait: str) -> None:
    response = client.put(f"/v1/nodes/{node}/traits/{trait}", headers=LATEST)
    assert response.status_code == 204, response.text


def test_allocate_deploy_undeploy_frees_the_node(stack: Stack) -> None:
    client = stack.client
    node = make_available(client, name="alloc-n1", resource_class="gold")
    _add_trait(client, "alloc-n1", "CUSTOM_GPU")
    allocation = _allocate(client, resource_class="gold", traits=["CUSTOM_GPU"], name="web-1")
    assert allocation["state"] == "active", allocation
    assert allocation["node_uuid"] == node["uuid"]
    assert "node" not in allocation
    assert allocation["traits"] == ["CUSTOM_GPU"]
    assert allocation["candidate_nodes"] == []
    assert allocation["links"][0]["href"].endswith(f"/v1/allocations/{allocation['uuid']}")
    node = get_node(client, "alloc-n1")
    assert node["instance_uuid"] == allocation["uuid"] == node["allocation_uuid"]
    assert node["instance_info"]["traits"] == ["CUSTOM_GPU"]
    shown = client.get("/v1/nodes/alloc-n1/allocation", headers=LATEST).json()
    assert shown["uuid"] == allocation["uuid"]
    assert client.get("/v1/allocations/web-1", headers=LATEST).json()["uuid"] == allocation["uuid"]
    assert provision(client, "alloc-n1", "active").status_code == 202
    wait_for_state(client, "alloc-n1", "active")
    response = client.delete("/v1/allocations/web-1", headers=LATEST)
    assert response.status_code == 409, response.text
    assert "maintenance" in error_text(response)
    assert provision(client, "alloc-n1", "deleted").status_code == 202
    node = wait_for_state(client, "alloc-n1", "available")
    assert node["instance_uuid"] is None
    assert node["allocation_uuid"] is None
    assert client.get("/v1/allocations/web-1", headers=LATEST).status_code == 404
    assert client.get("/v1/nodes/alloc-n1/allocation", headers=LATEST).status_code == 404


def test_matching_filters_name_their_reason(stack: Stack) -> None:
    client = stack.client
    make_available(client, name="m-1", resource_class="silver", owner="alice")
    create_node(client, name="m-enrolled", resource_class="bronze")
    error = _allocate(client, resource_class="bronze")
    assert error["state"] == "error"
    assert error["node_uuid"] is None
    assert "no available nodes match the resource class bronze" in error["last_error"]
    error = _allocate(client, resource_class="silver", traits=["CUSTOM_X"])
    assert "have the traits CUSTOM_X" in error["last_error"]
    error = _allocate(client, resource_class="silver", owner="bob")
    assert "belong to owner bob" in error["last_error"]
    error = _allocate(client, resource_class="silver", candidate_nodes=["m-enrolled"])
    assert "candidate nodes" in error["last_error"]
    ok = _allocate(client, resource_class="silver", owner="alice", candidate_nodes=["m-1"])
    assert ok["state"] == "active", ok
    assert ok["candidate_nodes"] == [get_node(client, "m-1")["uuid"]]
    listed = client.get("/v1/allocations?state=error", headers=LATEST).json()["allocations"]
    assert len(listed) == 4
    by_node = client.get("/v1/allocations?node=m-1", headers=LATEST).json()["allocations"]
    assert [a["uuid"] for a in by_node] == [ok["uuid"]]
    owned = client.get("/v1/allocations?owner=alice&fields=uuid,owner", headers=LATEST).json()
    assert owned["allocations"][0]["owner"] == "alice"
    assert set(owned["allocations"][0]) == {"uuid", "owner", "links"}


def test_unknown_power_state_and_maintenance_are_not_allocatable(stack: Stack) -> None:
    client = stack.client
    node = create_node(client, name="p-1", resource_class="rc")
    assert provision(client, "p-1", "manage").status_code == 202
    wait_for_state(client, "p-1", "manageable")
    client.put("/v1/nodes/p-1/maintenance", json={}, headers=LATEST)
    assert provision(client, "p-1", "provide").status_code == 202
    wait_for_state(client, "p-1", "available")
    error = _allocate(client, resource_class="rc")
    assert error["state"] == "error"
    client.delete("/v1/nodes/p-1/maintenance", headers=LATEST)
    assert _allocate(client, resource_class="rc")["node_uuid"] == node["uuid"]


def test_node_named_like_the_allocation_is_tried_first(stack: Stack) -> None:
    client = stack.client
    for index in range(4):
        make_available(client, name=f"host-{index}", resource_class="named")
    for index in (2, 0, 3):
        allocation = _allocate(client, resource_class="named", name=f"host-{index}")
        assert allocation["node_uuid"] == get_node(client, f"host-{index}")["uuid"]


def test_codes_and_version_gating(stack: Stack) -> None:
    client = stack.client
    old = version("1.51")
    assert client.get("/v1/allocations", headers=old).status_code == 404
    assert client.post("/v1/allocations", json={}, headers=old).status_code == 405
    assert client.delete("/v1/allocations/x", headers=old).status_code == 405
    patch = [{"op": "replace", "path": "/name", "value": "n"}]
    assert client.patch("/v1/allocations/x", json=patch, headers=version("1.56")).status_code == 405
    # openstacksdk's explicit nulls
    body: dict[str, Any] = {
        "name": None,
        "traits": [],
        "resource_class": "none",
        "candidate_nodes": None,
    }
    created = client.post("/v1/allocations", json=body, headers=version("1.60"))
    assert created.status_code == 201, created.text
    assert _create(client).status_code == 400  # no resource class, no node
    assert _create(client, resource_class="x", traits=["bad"]).status_code == 400
    assert _create(client, resource_class="x", candidate_nodes=["nope"]).status_code == 400
    assert _create(client, resource_class="x", name="not valid!").status_code == 400
    assert _create(client, resource_class="x", bogus=1).status_code in (400, 422)
    node = make_available(client, name="backfill", resource_class="bfx")
    assert "allocation_uuid" not in get_node_at(client, "backfill", "1.51")
    backfill = client.post(
        "/v1/allocations",
        json={"node": "backfill", "resource_class": "bfx"},
        headers=version("1.57"),
    )
    assert backfill.status_code == 400
    backfill = _create(client, node="backfill")
    assert backfill.status_code == 400
    assert "active" in error_text(backfill)
    uuid = created.json()["uuid"]
    assert _create(client, resource_class="x", uuid=uuid).status_code == 409
    named = _create(client, resource_class="x", name="dup")
    assert named.status_code == 201
    assert _create(client, resource_class="x", name="dup").status_code == 409
    response = client.patch(
        "/v1/allocations/dup",
        json=[{"op": "replace", "path": "/resource_class", "value": "y"}],
        headers=LATEST,
    )
    assert response.status_code == 400
    response = client.patch(
        "/v1/allocations/dup",
        json=[
            {"op": "replace", "path": "/name", "value": "renamed"},
            {"op": "add", "path": "/extra/k", "value": "v"},
        ],
        headers=LATEST,
    )
    assert response.status_code == 200, response.text
    assert response.json()["name"] == "renamed"
    assert response.json()["extra"] == {"k": "v"}
    response = client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[{"op": "add", "path": "/allocation_uuid", "value": uuid}],
        headers=LATEST,
    )
    assert response.status_code == 400
    assert client.get("/v1/allocations/missing", headers=LATEST).status_code == 404
    assert client.delete("/v1/nodes/backfill/allocation", headers=LATEST).status_code == 404
    page = client.get("/v1/allocations?limit=1", headers=LATEST).json()
    assert len(page["allocations"]) == 1
    assert "marker=" in page["next"]


def test_instance_uuid_taken_by_a_node_is_a_conflict(stack: Stack) -> None:
    client = stack.client
    taken = "6ad0e9a3-8f6c-4f6c-9f86-0d0d0b6b6a11"
    create_node(client, instance_uuid=taken)
    assert _create(client, resource_class="x", uuid=taken).status_code == 409


def test_backfill_and_deallocation_paths(stack: Stack) -> None:
    client = stack.client
    node = make_available(client, name="bf", resource_class="bf")
    instance = "0b0e3e0e-8a7c-4a0e-9c0e-3c7c2c9a7b11"
    response = client.patch(
        "/v1/nodes/bf",
        json=[{"op": "add", "path": "/instance_uuid", "value": instance}],
        headers=LATEST,
    )
    assert response.status_code == 200, response.text
    assert response.json()["allocation_uuid"] is None  # setting instance_uuid creates nothing
    assert provision(client, "bf", "active").status_code == 202
    wait_for_state(client, "bf", "active")
    created = _create(client, node="bf", name="bf-alloc")
    assert created.status_code == 201, created.text
    assert created.json()["state"] == "active"
    assert created.json()["uuid"] == instance
    assert created.json()["node_uuid"] == node["uuid"]
    assert get_node(client, "bf")["allocation_uuid"] == instance
    remove = [{"op": "remove", "path": "/instance_uuid"}]
    assert client.patch("/v1/nodes/bf", json=remove, headers=LATEST).status_code == 409
    assert client.put("/v1/nodes/bf/maintenance", json={}, headers=LATEST).status_code == 202
    response = client.patch("/v1/nodes/bf", json=remove, headers=LATEST)
    assert response.status_code == 200, response.text
    assert response.json()["allocation_uuid"] is None
    assert client.get("/v1/allocations/bf-alloc", headers=LATEST).status_code == 404
    # DELETE /v1/nodes/{id}/allocation on an available node
    client.delete("/v1/nodes/bf/maintenance", headers=LATEST)
    other = make_available(client, name="bf2", resource_class="bf2")
    allocation = _allocate(client, resource_class="bf2")
    assert allocation["node_uuid"] == other["uuid"]
    assert client.delete("/v1/nodes/bf2/allocation", headers=LATEST).status_code == 204
    after = get_node(client, "bf2")
    assert after["instance_uuid"] is None
    assert after["allocation_uuid"] is None
    assert after["instance_info"]["traits"] == []  # stays, as in Ironic
    # deleting a node in maintenance deletes its allocation
    allocation = _allocate(client, resource_class="bf2")
    assert client.put("/v1/nodes/bf2/maintenance", json={}, headers=LATEST).status_code == 202
    assert client.delete("/v1/nodes/bf2", headers=LATEST).status_code == 204
    assert client.get(f"/v1/allocations/{allocation['uuid']}", headers=LATEST).status_code == 404


def test_metalsmith_port_lookup_answers_no_ports(stack: Stack) -> None:
    response = stack.client.get("/v1/ports?binding%3Ahost_id=abc")
    assert response.status_code == 200
    assert response.json() == {"ports": []}


def test_seed_004_refusals(stack: Stack) -> None:
    """The allocation spec's 400s: bad resource class, a filter naming no node, a stray instance."""
    client = stack.client
    for bad in ("", "  ", " gold", "gold\n", "g\x07ld", "g" * 81):
        response = _create(client, resource_class=bad)
        assert response.status_code == 400, (bad, response.text)
        assert "resource class" in error_text(response) or "resource_class" in error_text(response)
    assert client.get("/v1/allocations", headers=LATEST).json()["allocations"] == []
    listed = client.get("/v1/allocations?resource_class=", headers=LATEST)
    assert listed.status_code == 400
    missing = client.get("/v1/allocations?node=no-such-node", headers=LATEST)
    assert missing.status_code == 400
    assert "no-such-node could not be found" in error_text(missing)
    create_node(client, name="stray", instance_uuid="6ad0e9a3-8f6c-4f6c-9f86-0d0d0b6b6a12")
    stray = client.get("/v1/nodes/stray/allocation", headers=LATEST)
    assert stray.status_code == 400
    assert "does not belong to any allocation" in error_text(stray)
    create_node(client, name="free")
    assert client.get("/v1/nodes/free/allocation", headers=LATEST).status_code == 404


def test_an_allocation_goes_only_when_the_node_allows_updates(stack: Stack) -> None:
    """Seed 004: 409 for an active node or a state that allows no update; else 204."""
    client = stack.client
    make_available(client, name="held", resource_class="seed4")
    allocation = _allocate(client, resource_class="seed4", name="on-held")
    assert allocation["state"] == "active", allocation
    # The states below are written behind the conductor's back: a running one would
    # take a "deploying" node over (its periodic takeover) and hold it meanwhile.
    stack.conductor.stop(timeout=30)

    def put_node_in(state: str, target: str | None) -> None:
        # Where a flow would leave it; no conductor runs, so it stays there.
        with stack.db.write() as session:
            session.execute(
                update(Node)
                .where(Node.name == "held")
                .values(provision_state=state, target_provision_state=target)
            )

    for state, target in (("active", None), ("deploying", "active"), ("wait call-back", "active")):
        put_node_in(state, target)
        refused = client.delete("/v1/allocations/on-held", headers=LATEST)
        assert refused.status_code == 409, (state, refused.text)
        removal = [{"op": "remove", "path": "/instance_uuid"}]
        assert client.patch("/v1/nodes/held", json=removal, headers=LATEST).status_code == 409
    put_node_in("deploy failed", "active")  # a state that allows updates, target set
    assert client.delete("/v1/allocations/on-held", headers=LATEST).status_code == 204
    node = get_node(client, "held")
    assert (node["instance_uuid"], node["allocation_uuid"]) == (None, None)


def test_a_missing_nodes_allocation_is_a_bad_request_as_in_ironic(sqlite_stack: Stack) -> None:
    """Ironic 39 answers ``GET /v1/nodes/<missing>/allocation`` with 400 and the same
    path's ``DELETE`` with 404 (checked against a running Ironic)."""
    client = sqlite_stack.client
    shown = client.get("/v1/nodes/None/allocation", headers=LATEST)
    assert shown.status_code == 400, shown.text
    assert error_text(shown) == "Node None could not be found."
    assert client.get("/v1/nodes/None/allocation", headers=version("1.51")).status_code == 404
    assert client.delete("/v1/nodes/None/allocation", headers=LATEST).status_code == 404
