"""Runbooks: the ``/v1/runbooks`` resource, who may keep and use one, and flows it drives.

The resource's shape, validation, version gating and ownership run on
SQLite with ``http_basic`` personas; cleaning and servicing with a runbook
run a conductor on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    get_node,
    provision,
    version,
    wait_for_state,
    wait_until,
)
from tests.support.auth import (
    ADMIN,
    LESSEE_ADMIN,
    OTHER_ADMIN,
    OWNER_ADMIN,
    OWNER_MEMBER,
    OWNER_READER,
    READER,
    Persona,
    basic_auth_settings,
)
from tests.support.stack import Stack, start_stack

DELETE_RAID = {"interface": "raid", "step": "delete_configuration", "args": {}, "order": 1}
V1_92 = version("1.92")


def _name() -> str:
    return f"CUSTOM_RB_{uuid.uuid4().hex[:10].upper()}"


def _create(client: TestClient, headers: dict[str, str] = LATEST, **body: Any) -> Any:
    body.setdefault("name", _name())
    body.setdefault("steps", [DELETE_RAID])
    return client.post("/v1/runbooks", json=body, headers=headers)


def _created(client: TestClient, headers: dict[str, str] = LATEST, **body: Any) -> dict[str, Any]:
    response = _create(client, headers, **body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _patch(client: TestClient, ident: str, ops: list[dict[str, Any]], headers: Any = LATEST) -> Any:
    return client.patch(f"/v1/runbooks/{ident}", json=ops, headers=headers)


def _manageable(client: TestClient, *traits: str) -> dict[str, Any]:
    node = create_node(client)
    for trait in traits:
        assert (
            client.put(f"/v1/nodes/{node['uuid']}/traits/{trait}", headers=LATEST).status_code
            == 204
        )
    assert provision(client, node["uuid"], "manage").status_code == 202
    return wait_for_state(client, node["uuid"], "manageable")


# -- the resource ----------------------------------------------------------------


def test_create_show_list_and_delete(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    runbook = _created(client, extra={"team": "fw"}, steps=[{**DELETE_RAID, "order": "3"}])
    assert runbook["steps"] == [{**DELETE_RAID, "order": "3"}]  # echoed as given
    assert runbook["owner"] is None
    assert runbook["public"] is False
    assert runbook["traits"] == []
    assert runbook["description"] is None
    assert runbook["disable_ramdisk"] is False
    assert len(runbook["links"]) == 2
    assert runbook["uuid"] in runbook["links"][0]["href"]

    shown = client.get(f"/v1/runbooks/{runbook['name']}", headers=LATEST).json()
    assert shown["steps"] == [{**DELETE_RAID, "order": 3}]
    assert shown["extra"] == {"team": "fw"}
    listed = client.get("/v1/runbooks", headers=LATEST).json()["runbooks"]
    assert [set(r) for r in listed] == [{"uuid", "name", "links"}]
    detailed = client.get("/v1/runbooks?detail=true", headers=LATEST).json()["runbooks"]
    assert detailed[0]["steps"] == shown["steps"]
    only = client.get("/v1/runbooks?fields=uuid,owner", headers=LATEST).json()["runbooks"]
    assert set(only[0]) == {"uuid", "owner", "links"}

    assert client.delete(f"/v1/runbooks/{runbook['uuid']}", headers=LATEST).status_code == 204
    missing = client.get(f"/v1/runbooks/{runbook['uuid']}", headers=LATEST)
    assert missing.status_code == 404
    assert "could not be found" in error_text(missing)


def test_pages_link_to_the_next(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    made = [_created(client)["uuid"] for _ in range(3)]
    first = client.get("/v1/runbooks?limit=2", headers=LATEST).json()
    assert [r["uuid"] for r in first["runbooks"]] == made[:2]
    assert made[1] in first["next"]
    rest = client.get(first["next"].split("/v1", 1)[1], headers=LATEST).json()
    assert [r["uuid"] for r in rest["runbooks"]] == made[2:]
    refused = client.get("/v1/runbooks?sort_key=steps", headers=LATEST)
    assert refused.status_code == 400


def test_secret_step_arguments_are_masked(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    step = {**DELETE_RAID, "args": {"password": "hunter2", "size": 3}}
    runbook = _created(client, steps=[step])
    shown = client.get(f"/v1/runbooks/{runbook['uuid']}", headers=LATEST)
    assert "hunter2" not in shown.text
    assert shown.json()["steps"][0]["args"] == {"password": "******", "size": 3}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"name": "not-a-trait"}, 400),  # at 1.92 the name must be a trait
        ({"name": None}, 400),
        ({"steps": []}, 400),
        ({"steps": {"key": "value"}}, 400),
        ({"steps": [{"invalid_key": "value"}]}, 400),
        ({"steps": [{**DELETE_RAID, "interface": "inspect"}]}, 400),
        ({"steps": [{**DELETE_RAID, "order": -1}]}, 400),
        ({"steps": [{**DELETE_RAID, "order": True}]}, 400),
        ({"steps": [DELETE_RAID, {**DELETE_RAID, "order": 2}]}, 400),  # the same step twice
        ({"uuid": "malformed:uuid"}, 400),
        ({"surprise": 1}, 400),
        ({"description": "needs 1.112"}, 400),
    ],
)
def test_bad_bodies_are_refused_and_store_nothing(
    sqlite_stack: Stack, body: dict[str, Any], status: int
) -> None:
    client = sqlite_stack.client
    if "name" not in body:
        body = {**body, "name": _name()}
    if "steps" not in body:
        body = {**body, "steps": [DELETE_RAID]}
    response = client.post("/v1/runbooks", json=body, headers=V1_92)
    assert response.status_code == status, response.text
    assert client.get("/v1/runbooks", headers=LATEST).json()["runbooks"] == []


def test_names_are_unique_and_any_logical_name_from_1_112(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    named = _created(client, name="firmware-upgrade.v2")
    assert named["name"] == "firmware-upgrade.v2"
    again = _create(client, name="firmware-upgrade.v2")
    assert again.status_code == 409
    assert _create(client, name="has space").status_code == 400
    taken_uuid = _create(client, uuid=named["uuid"])
    assert taken_uuid.status_code == 409


def test_versions_gate_the_collection(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    runbook = _created(client)
    old = version("1.91")
    assert client.get("/v1/runbooks", headers=old).status_code == 404
    assert client.get(f"/v1/runbooks/{runbook['uuid']}", headers=old).status_code == 404
    assert _create(client, old).status_code == 405
    assert _patch(client, runbook["uuid"], [], old).status_code == 405
    assert client.delete(f"/v1/runbooks/{runbook['uuid']}", headers=old).status_code == 405
    shown = client.get(f"/v1/runbooks/{runbook['uuid']}", headers=V1_92).json()
    assert "traits" not in shown
    assert "description" not in shown
    assert client.get(f"/v1/runbooks/{runbook['uuid']}/traits", headers=V1_92).status_code == 404


def test_patch_changes_name_steps_and_extra(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    runbook = _created(client)
    create_raid = {"interface": "raid", "step": "create_configuration", "args": {}, "order": 2}
    new_name = _name()
    response = _patch(
        client,
        runbook["uuid"],
        [
            {"op": "replace", "path": "/name", "value": new_name},
            {"op": "add", "path": "/steps/1", "value": create_raid},
            {"op": "add", "path": "/extra/a", "value": 1},
            {"op": "add", "path": "/description", "value": "rebuild the arrays"},
        ],
    )
    assert response.status_code == 200, response.text
    shown = client.get(f"/v1/runbooks/{new_name}", headers=LATEST).json()
    assert shown["steps"] == [DELETE_RAID, create_raid]
    assert shown["extra"] == {"a": 1}
    assert shown["description"] == "rebuild the arrays"
    assert shown["updated_at"] is not None


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "remove", "path": "/steps/0"}],
        [{"op": "remove", "path": "/steps"}],
        [{"op": "remove", "path": "/name"}],
        [{"op": "replace", "path": "/name", "value": ""}],
        [{"op": "replace", "path": "/steps/0/order", "value": "first"}],
        [{"op": "add", "path": "/traits", "value": ["CUSTOM_X"]}],
        [{"op": "replace", "path": "/uuid", "value": str(uuid.uuid4())}],
    ],
)
def test_bad_patches_are_refused_and_change_nothing(
    sqlite_stack: Stack, ops: list[dict[str, Any]]
) -> None:
    client = sqlite_stack.client
    runbook = _created(client)
    before = client.get(f"/v1/runbooks/{runbook['uuid']}", headers=LATEST).json()
    response = _patch(client, runbook["uuid"], ops)
    assert response.status_code == 400, response.text
    assert client.get(f"/v1/runbooks/{runbook['uuid']}", headers=LATEST).json() == before


def test_traits_subresource(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    runbook = _created(client)
    base = f"/v1/runbooks/{runbook['uuid']}/traits"
    put = client.put(f"{base}/CUSTOM_GPU", headers=LATEST)
    assert put.status_code == 204
    assert put.headers["Location"].endswith(f"/v1/runbooks/{runbook['uuid']}/traits/CUSTOM_GPU")
    body = {"traits": ["CUSTOM_B", "CUSTOM_A", "CUSTOM_A"]}
    assert client.put(base, json=body, headers=LATEST).status_code == 204
    assert client.get(base, headers=LATEST).json() == {"traits": ["CUSTOM_A", "CUSTOM_B"]}
    assert client.put(f"{base}/lowercase", headers=LATEST).status_code == 400
    with_body = client.put(f"{base}/CUSTOM_C", json={"traits": []}, headers=LATEST)
    assert with_body.status_code == 400
    assert client.delete(f"{base}/CUSTOM_A", headers=LATEST).status_code == 204
    assert client.delete(f"{base}/CUSTOM_NOT_THERE", headers=LATEST).status_code == 204
    shown = client.get(f"/v1/runbooks/{runbook['uuid']}", headers=LATEST).json()
    assert shown["traits"] == ["CUSTOM_B"]
    assert client.delete(base, headers=LATEST).status_code == 204
    assert client.get(base, headers=LATEST).json() == {"traits": []}


# -- owners, public runbooks and the policy ------------------------------------------


@pytest.fixture
def authed(tmp_path: Path) -> Iterator[Stack]:
    running = start_stack(basic_auth_settings(f"sqlite:///{tmp_path}/mf.sqlite", tmp_path))
    try:
        yield running
    finally:
        running.stop()


def _as(persona: Persona) -> dict[str, str]:
    return persona.headers


def test_a_project_creates_only_its_own_private_runbooks(authed: Stack) -> None:
    client = authed.client
    own = _created(client, _as(OWNER_ADMIN))
    assert own["owner"] == "p-owner"
    assert own["public"] is False
    other = _create(client, _as(OWNER_ADMIN), owner="p-other")
    assert other.status_code == 400
    assert "own project" in error_text(other)
    public = _create(client, _as(OWNER_ADMIN), public=True)
    assert public.status_code == 400
    assert _create(client, _as(OWNER_MEMBER)).status_code == 403  # members do not create
    given = _created(client, _as(ADMIN), owner="p-other")
    assert given["owner"] == "p-other"


def test_projects_see_their_own_and_public_runbooks(authed: Stack) -> None:
    client = authed.client
    public = _created(client, _as(ADMIN), public=True)
    private = _created(client, _as(ADMIN))
    owned = _created(client, _as(OWNER_ADMIN))
    others = _created(client, _as(OTHER_ADMIN))

    def listed(persona: Persona) -> set[str]:
        response = client.get("/v1/runbooks", headers=_as(persona))
        assert response.status_code == 200, response.text
        return {r["uuid"] for r in response.json()["runbooks"]}

    assert listed(OWNER_READER) == {public["uuid"], owned["uuid"]}
    assert listed(READER) == {public["uuid"], private["uuid"], owned["uuid"], others["uuid"]}
    # Not concealed: another project's runbook is forbidden, a public one readable.
    assert (
        client.get(f"/v1/runbooks/{others['uuid']}", headers=_as(OWNER_READER)).status_code == 403
    )
    assert (
        client.get(f"/v1/runbooks/{public['uuid']}", headers=_as(OWNER_READER)).status_code == 200
    )
    assert client.get(f"/v1/runbooks/{owned['uuid']}", headers=_as(OWNER_READER)).status_code == 200
    # Reading is not changing: a public runbook is the deployment's to change.
    renamed = _patch(
        client, public["uuid"], [{"op": "add", "path": "/extra/x", "value": 1}], _as(OWNER_ADMIN)
    )
    assert renamed.status_code == 403
    gone = client.delete(f"/v1/runbooks/{owned['uuid']}", headers=_as(OWNER_MEMBER))
    assert gone.status_code == 403  # a member is not a manager
    assert (
        client.delete(f"/v1/runbooks/{owned['uuid']}", headers=_as(OWNER_ADMIN)).status_code == 204
    )


def test_only_the_deployment_makes_a_runbook_public_or_gives_it_away(authed: Stack) -> None:
    client = authed.client
    owned = _created(client, _as(OWNER_ADMIN))
    make_public = [{"op": "replace", "path": "/public", "value": True}]
    assert _patch(client, owned["uuid"], make_public, _as(OWNER_ADMIN)).status_code == 403
    give = [{"op": "replace", "path": "/owner", "value": "p-other"}]
    assert _patch(client, owned["uuid"], give, _as(OWNER_ADMIN)).status_code == 403

    made = _patch(client, owned["uuid"], make_public, _as(ADMIN))
    assert made.status_code == 200, made.text
    assert made.json()["public"] is True
    assert made.json()["owner"] is None
    # A public runbook has no owner, unless the same patch makes it private.
    refused = _patch(client, owned["uuid"], give, _as(ADMIN))
    assert refused.status_code == 400
    private_again: list[dict[str, Any]] = [
        *give,
        {"op": "replace", "path": "/public", "value": False},
    ]
    moved = _patch(client, owned["uuid"], private_again, _as(ADMIN))
    assert moved.status_code == 200, moved.text
    assert (moved.json()["owner"], moved.json()["public"]) == ("p-other", False)


# -- using a runbook -------------------------------------------------------------------


def test_manual_clean_with_a_runbook_runs_its_steps_in_order(stack: Stack) -> None:
    client = stack.client
    node = _manageable(client, "CUSTOM_RAID_NODES")
    create_raid = {
        "interface": "raid",
        "step": "create_configuration",
        "args": {"create_nonroot_volumes": False},
        "order": 2,
    }
    runbook = _created(client, steps=[create_raid, DELETE_RAID])  # listed out of order
    base = f"/v1/runbooks/{runbook['uuid']}/traits"
    refused = provision(client, node["uuid"], "clean", runbook=runbook["name"])
    assert refused.status_code == 400
    assert "no traits" in error_text(refused)
    assert client.put(f"{base}/CUSTOM_OTHER", headers=LATEST).status_code == 204
    refused = provision(client, node["uuid"], "clean", runbook=runbook["name"])
    assert refused.status_code == 400
    assert "not been approved" in error_text(refused)
    assert get_node(client, node["uuid"])["provision_state"] == "manageable"

    assert client.put(f"{base}/CUSTOM_RAID_NODES", headers=LATEST).status_code == 204
    raid = {"logical_disks": [{"raid_level": "1", "size_gb": "MAX", "is_root_volume": True}]}
    target = client.put(f"/v1/nodes/{node['uuid']}/states/raid", json=raid, headers=LATEST)
    assert target.status_code == 204
    started = provision(client, node["uuid"], "clean", runbook=runbook["uuid"])
    assert started.status_code == 202, started.text
    done = wait_for_state(client, node["uuid"], "manageable")
    assert done["last_error"] is None
    assert done["raid_config"]["logical_disks"][0]["is_root_volume"] is True
    history = client.get(f"/v1/nodes/{node['uuid']}/history?detail=true", headers=LATEST)
    started_steps = [
        e["event"].split(" ")[0]
        for e in history.json()["history"]
        if e["event_type"] == "clean_step" and " started" in e["event"]
    ]
    assert started_steps == ["raid.delete_configuration", "raid.create_configuration"]


def test_below_1_112_the_runbook_name_must_be_a_node_trait(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    name = _name()
    node = _manageable(client, name)
    runbook = _created(client, name=name)
    assert provision(client, node["uuid"], "clean", runbook=name).status_code == 400  # 1.115
    old = client.put(
        f"/v1/nodes/{node['uuid']}/states/provision",
        json={"target": "clean", "runbook": runbook["uuid"]},
        headers=version("1.111"),
    )
    assert old.status_code == 202, old.text
    assert wait_for_state(client, node["uuid"], "manageable")["last_error"] is None
    older = client.put(
        f"/v1/nodes/{node['uuid']}/states/provision",
        json={"target": "clean", "runbook": runbook["uuid"]},
        headers=version("1.91"),
    )
    assert older.status_code == 406


@pytest.mark.parametrize(
    ("target", "extra", "status"),
    [
        ("clean", {"clean_steps": [DELETE_RAID]}, 400),  # both steps and a runbook
        ("active", {}, 400),  # deploy takes no runbook
        ("provide", {}, 400),
        ("clean", {"runbook": "CUSTOM_NO_SUCH_RUNBOOK"}, 404),
    ],
)
def test_misused_runbooks_are_refused_and_change_nothing(
    sqlite_stack: Stack, target: str, extra: dict[str, Any], status: int
) -> None:
    client = sqlite_stack.client
    name = _name()
    node = _manageable(client, name)
    runbook = _created(client, name=name)
    client.put(f"/v1/runbooks/{runbook['uuid']}/traits/{name}", headers=LATEST)
    response = provision(client, node["uuid"], target, **{"runbook": name, **extra})
    assert response.status_code == status, response.text
    assert get_node(client, node["uuid"])["provision_state"] == "manageable"


def _as_provision(client: TestClient, ident: str, persona: Persona, **body: Any) -> Any:
    return client.put(f"/v1/nodes/{ident}/states/provision", json=body, headers=_as(persona))


def _as_wait(client: TestClient, ident: str, state: str) -> None:
    def settled() -> bool:
        node = client.get(f"/v1/nodes/{ident}", headers=_as(ADMIN)).json()
        return bool(node["provision_state"] == state and node["target_provision_state"] is None)

    wait_until(f"node {ident} {state}", settled)


def test_a_project_uses_its_own_runbooks_only(authed: Stack) -> None:
    client = authed.client
    made = client.post(
        "/v1/nodes",
        json={"driver": "fake-hardware", "owner": "p-owner", "lessee": "p-lessee"},
        headers=_as(ADMIN),
    )
    ident = made.json()["uuid"]
    trait = client.put(f"/v1/nodes/{ident}/traits/CUSTOM_FLEET", headers=_as(ADMIN))
    assert trait.status_code == 204
    assert _as_provision(client, ident, ADMIN, target="manage").status_code == 202
    _as_wait(client, ident, "manageable")

    def runbook(persona: Persona, **body: Any) -> str:
        made = _created(client, _as(persona), **body)
        put = client.put(f"/v1/runbooks/{made['uuid']}/traits/CUSTOM_FLEET", headers=_as(ADMIN))
        assert put.status_code == 204
        return str(made["uuid"])

    others = runbook(OTHER_ADMIN)
    private = runbook(ADMIN)
    public = runbook(ADMIN, public=True)
    own = runbook(OWNER_ADMIN)
    # As Ironic's default: ``use`` is ``update``'s rule, so a public runbook (no owner) is
    # read by every project but used only by the deployment, unless a policy file says more.
    for refused in (others, private, public):
        response = _as_provision(client, ident, OWNER_ADMIN, target="clean", runbook=refused)
        assert response.status_code == 403, response.text
        assert "baremetal:runbook:use" in error_text(response)
    response = _as_provision(client, ident, OWNER_ADMIN, target="clean", runbook=own)
    assert response.status_code == 202, response.text
    _as_wait(client, ident, "manageable")
    response = _as_provision(client, ident, ADMIN, target="clean", runbook=public)
    assert response.status_code == 202, response.text
    _as_wait(client, ident, "manageable")
    # The lessee may ask for a clean, but not with the owner's runbook.
    leased = _as_provision(client, ident, LESSEE_ADMIN, target="clean", runbook=own)
    assert leased.status_code == 403, leased.text


def test_service_with_a_runbook_returns_to_active(stack: Stack) -> None:
    client = stack.client
    name = _name()
    node = _manageable(client, name)
    runbook = _created(client, name=name, disable_ramdisk=True)
    client.put(f"/v1/runbooks/{runbook['uuid']}/traits/{name}", headers=LATEST)
    assert provision(client, node["uuid"], "provide").status_code == 202
    wait_for_state(client, node["uuid"], "available")
    assert provision(client, node["uuid"], "active").status_code == 202
    wait_for_state(client, node["uuid"], "active")
    response = provision(client, node["uuid"], "service", runbook=name)
    assert response.status_code == 202, response.text
    done = wait_for_state(client, node["uuid"], "active")
    assert done["last_error"] is None
    history = client.get(f"/v1/nodes/{node['uuid']}/history?detail=true", headers=LATEST)
    assert any(
        e["event"].startswith("raid.delete_configuration") for e in history.json()["history"]
    )


def test_a_service_step_the_node_lacks_is_refused_before_the_node_moves(
    sqlite_stack: Stack,
) -> None:
    client = sqlite_stack.client
    name = _name()
    node = _manageable(client, name)
    assert provision(client, node["uuid"], "provide").status_code == 202
    wait_for_state(client, node["uuid"], "available")
    assert provision(client, node["uuid"], "active").status_code == 202
    wait_for_state(client, node["uuid"], "active")
    missing = {"interface": "raid", "step": "no_such_step", "args": {}, "order": 1}
    runbook = _created(client, name=name, steps=[missing])
    client.put(f"/v1/runbooks/{runbook['uuid']}/traits/{name}", headers=LATEST)
    for body in ({"runbook": name}, {"service_steps": [missing]}):
        response = provision(client, node["uuid"], "service", **body)
        assert response.status_code == 400, response.text
        assert "no_such_step" in error_text(response)
        assert get_node(client, node["uuid"])["provision_state"] == "active"
