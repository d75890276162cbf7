"""``api.auth_strategy = "keystone"`` against a real Keystone.

One Keystone for the module (it takes seconds to start) holds two projects,
``p-owner`` and ``p-other``, and four users: ``sysadmin`` (admin on the
system), ``sysreader`` (reader on the system), ``owner-member`` (member of
``p-owner``) and ``other-admin`` (admin of ``p-other``). metalforge validates
their tokens with keystonemiddleware, configured as Ironic's
``[keystone_authtoken]`` would be with the bootstrap admin as service user,
and applies Ironic's policy defaults to the roles and scope Keystone put in
each token. Requests are made through the in-process test client and, for
the ``baremetal`` CLI, over a real socket.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from metalforge.api.auth.keystone import KeystoneVerifier
from metalforge.config import Settings, load_settings
from metalforge_lab.http_errors import HttpError
from metalforge_lab.keystone import Keystone, Project, User
from metalforge_lab.ports import free_port
from tests.support.api import error_text
from tests.support.keystone import running_keystone
from tests.support.stack import FAST_CONDUCTOR, LiveServer, Stack, start_stack

pytestmark = pytest.mark.slow

BAREMETAL = Path(sys.executable).with_name("baremetal")
CLI_TIMEOUT = 120.0
AUTH_REQUIRED = "The request you have made requires authentication."
LATEST = {"X-OpenStack-Ironic-API-Version": "latest"}


@dataclass(frozen=True)
class World:
    """The module's Keystone, its projects and users, and a stack validating its tokens."""

    keystone: Keystone
    p_owner: Project
    p_other: Project
    sysadmin: User
    sysreader: User
    owner_member: User
    other_admin: User
    stack: Stack
    server: LiveServer


def keystone_settings(keystone: Keystone, db_url: str, **authtoken: Any) -> Settings:
    """A stack's settings (as ``test_settings``) with Keystone authentication.

    The service user is the bootstrap admin, project-scoped to ``admin``: what
    a small deployment's ``[keystone_authtoken]`` section holds.
    """
    return load_settings(
        database={"url": db_url},
        conductor={**FAST_CONDUCTOR, "hostname": "test-conductor"},
        inspector={"port": free_port()},
        api={"auth_strategy": "keystone"},
        keystone_authtoken={
            "www_authenticate_uri": keystone.url,
            "auth_type": "password",
            "auth_url": keystone.auth_url,
            "username": keystone.admin.name,
            "password": keystone.admin.password,
            "project_name": keystone.admin_project.name,
            "user_domain_id": keystone.domain_id,
            "project_domain_id": keystone.domain_id,
            "region_name": keystone.region,
            # The harness's Keystone has a public endpoint only; keystonemiddleware
            # looks for the internal one unless told (its ``interface`` option).
            "interface": "public",
            **authtoken,
        },
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("keystone-auth")
    with running_keystone(tmp) as keystone:
        p_owner = keystone.create_project("p-owner")
        p_other = keystone.create_project("p-other")
        sysadmin = keystone.create_user("sysadmin", "sysadmin-secret")
        keystone.grant_system_role(sysadmin, "admin")
        sysreader = keystone.create_user("sysreader", "sysreader-secret")
        keystone.grant_system_role(sysreader, "reader")
        owner_member = keystone.create_user("owner-member", "owner-member-secret")
        keystone.grant_project_role(owner_member, p_owner, "member")
        other_admin = keystone.create_user("other-admin", "other-admin-secret")
        keystone.grant_project_role(other_admin, p_other, "admin")

        stack = start_stack(keystone_settings(keystone, f"sqlite:///{tmp}/metalforge.sqlite"))
        server = LiveServer(stack)
        try:
            server.start()
            yield World(
                keystone,
                p_owner,
                p_other,
                sysadmin,
                sysreader,
                owner_member,
                other_admin,
                stack,
                server,
            )
        finally:
            server.stop()
            stack.stop()


@dataclass(frozen=True)
class Tokens:
    sysadmin: str
    sysreader: str
    owner_member: str
    other_admin: str


@pytest.fixture(scope="module")
def tokens(world: World) -> Tokens:
    ks = world.keystone
    return Tokens(
        sysadmin=ks.system_token(world.sysadmin),
        sysreader=ks.system_token(world.sysreader),
        owner_member=ks.project_token(world.owner_member, world.p_owner),
        other_admin=ks.project_token(world.other_admin, world.p_other),
    )


@pytest.fixture(scope="module")
def nodes(world: World, tokens: Tokens) -> dict[str, str]:
    """Two nodes enrolled by the system admin: ``n-owner`` (p-owner's) and ``n-other``."""
    client = world.stack.client
    made = {}
    for name, project in (("n-owner", world.p_owner), ("n-other", world.p_other)):
        response = client.post(
            "/v1/nodes",
            json={"driver": "fake-hardware", "name": name, "owner": project.id},
            headers=auth(tokens.sysadmin),
        )
        assert response.status_code == 201, response.text
        assert response.json()["owner"] == project.id
        made[name] = response.json()["uuid"]
    return made


def auth(token: str) -> dict[str, str]:
    return {"X-Auth-Token": token, **LATEST}


def names(client: TestClient, token: str, path: str = "/v1/nodes") -> set[str]:
    response = client.get(path, headers=auth(token))
    assert response.status_code == 200, response.text
    return {n["name"] for n in response.json()["nodes"]}


# -- authentication -------------------------------------------------------------


def test_without_a_token_the_api_answers_401_with_keystones_challenge(world: World) -> None:
    client = world.stack.client
    for headers in ({}, LATEST, {"X-Auth-Token": "", **LATEST}):
        response = client.get("/v1/nodes", headers=headers)
        assert response.status_code == 401, response.text
        assert response.headers["WWW-Authenticate"] == f'Keystone uri="{world.keystone.url}"'
        assert response.headers["content-type"] == "application/json"
        inner = json.loads(response.json()["error_message"])
        assert inner == {"faultcode": "Client", "faultstring": AUTH_REQUIRED, "debuginfo": None}


def test_a_token_keystone_does_not_know_is_401(world: World, tokens: Tokens) -> None:
    client = world.stack.client
    garbage = (
        "not-a-token",
        "gAAAAABnotafernettokenatall" * 4,
        tokens.sysadmin[:-4] + ("AAAA" if not tokens.sysadmin.endswith("AAAA") else "BBBB"),
    )
    for token in garbage:
        response = client.get("/v1/nodes", headers=auth(token))
        assert response.status_code == 401, (token, response.text)
        assert response.headers["WWW-Authenticate"] == f'Keystone uri="{world.keystone.url}"'
        assert error_text(response) == AUTH_REQUIRED


def test_an_unscoped_token_is_401(world: World) -> None:
    # A token without a project, domain or system carries no roles.
    unscoped = world.keystone.request(
        "POST",
        "/auth/tokens",
        {
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {
                            "name": world.owner_member.name,
                            "domain": {"id": world.keystone.domain_id},
                            "password": world.owner_member.password,
                        }
                    },
                }
            }
        },
        expect=(201,),
    ).headers["X-Subject-Token"]
    response = world.stack.client.get("/v1/nodes", headers=auth(unscoped))
    assert response.status_code == 401, response.text


def test_version_discovery_needs_no_token(world: World) -> None:
    client = world.stack.client
    for path in ("/", "/v1"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
    assert response.json()["id"] == "v1"


def test_service_credentials_are_not_logged_as_unknown_options(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    # auth_url, username, password... are the auth plugin's options, not
    # keystonemiddleware's: a correct configuration starts without warnings
    # about them, and a misspelt option is still named.
    options = dict(world.stack.settings.keystone_authtoken, pasword="typo")
    with caplog.at_level(logging.WARNING):
        verifier = KeystoneVerifier(options)
    unknown = {r.getMessage() for r in caplog.records if "not known" in r.getMessage()}
    assert unknown == {'The option "pasword" is not known to keystonemiddleware'}
    assert world.keystone.admin.password not in caplog.text
    # The credentials reached the plugin: the service user validates a token.
    caller = verifier.verify(world.keystone.project_token(world.owner_member, world.p_owner))
    assert caller is not None
    assert caller.project_id == world.p_owner.id
    assert caller.roles == {"member", "reader"}

    with pytest.raises(ValueError, match="no-such-plugin"):
        KeystoneVerifier(dict(options, auth_type="no-such-plugin"))


# -- authorization by the token's scope and roles ---------------------------------


def test_the_system_admin_enrolls_nodes_for_projects(
    world: World, tokens: Tokens, nodes: dict[str, str]
) -> None:
    client = world.stack.client
    assert names(client, tokens.sysadmin) == {"n-owner", "n-other"}
    shown = client.get(f"/v1/nodes/{nodes['n-other']}", headers=auth(tokens.sysadmin))
    assert shown.status_code == 200, shown.text
    assert shown.json()["owner"] == world.p_other.id


def test_the_system_reader_sees_everything_and_changes_nothing(
    world: World, tokens: Tokens, nodes: dict[str, str]
) -> None:
    client = world.stack.client
    assert names(client, tokens.sysreader) == {"n-owner", "n-other"}
    assert names(client, tokens.sysreader, "/v1/nodes/detail") == {"n-owner", "n-other"}
    for node in nodes.values():
        assert client.get(f"/v1/nodes/{node}", headers=auth(tokens.sysreader)).status_code == 200
    response = client.post(
        "/v1/nodes", json={"driver": "fake-hardware"}, headers=auth(tokens.sysreader)
    )
    assert response.status_code == 403, response.text
    assert "baremetal:node:create" in error_text(response)


def test_a_project_member_sees_and_acts_on_its_own_nodes_only(
    world: World, tokens: Tokens, nodes: dict[str, str]
) -> None:
    client = world.stack.client
    token = tokens.owner_member
    assert names(client, token) == {"n-owner"}
    assert names(client, token, "/v1/nodes/detail") == {"n-owner"}
    mine = client.get(f"/v1/nodes/{nodes['n-owner']}", headers=auth(token))
    assert mine.status_code == 200, mine.text
    assert mine.json()["owner"] == world.p_owner.id
    # Another project's node does not exist for it, by uuid or by name.
    for ident in (nodes["n-other"], "n-other"):
        hidden = client.get(f"/v1/nodes/{ident}", headers=auth(token))
        assert hidden.status_code == 404, hidden.text
        assert error_text(hidden) == f"Node {ident} could not be found."

    power = client.put(
        f"/v1/nodes/{nodes['n-owner']}/states/power",
        json={"target": "power on"},
        headers=auth(token),
    )
    assert power.status_code == 202, power.text

    patch = client.patch(
        f"/v1/nodes/{nodes['n-owner']}",
        json=[{"op": "add", "path": "/driver_info/fake_address", "value": "10.9.9.9"}],
        headers=auth(token),
    )
    assert patch.status_code == 403, patch.text
    assert "baremetal:node:update:driver_info" in error_text(patch)
    # Nor may it touch the other project's node at all.
    other = client.put(
        f"/v1/nodes/{nodes['n-other']}/states/power",
        json={"target": "power on"},
        headers=auth(token),
    )
    assert other.status_code == 404, other.text


def test_another_projects_admin_sees_only_its_project(
    world: World, tokens: Tokens, nodes: dict[str, str]
) -> None:
    client = world.stack.client
    assert names(client, tokens.other_admin) == {"n-other"}
    hidden = client.get(f"/v1/nodes/{nodes['n-owner']}", headers=auth(tokens.other_admin))
    assert hidden.status_code == 404, hidden.text
    mine = client.get(f"/v1/nodes/{nodes['n-other']}", headers=auth(tokens.other_admin))
    assert mine.status_code == 200, mine.text


# -- the real client --------------------------------------------------------------


def test_baremetal_cli_authenticates_with_keystone(world: World, nodes: dict[str, str]) -> None:
    if not BAREMETAL.exists():
        pytest.skip("python-ironicclient's `baremetal` is not installed in this environment")
    ks = world.keystone
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    # Keystone's catalog has no baremetal service. ``--os-endpoint-override``
    # is not per service (the CLI ignores it), and ``--os-endpoint`` is
    # ambiguous once credentials are given: openstacksdk's per-service setting
    # (``baremetal_endpoint_override`` in clouds.yaml) names it.
    env["OS_BAREMETAL_ENDPOINT_OVERRIDE"] = world.server.url

    def baremetal(user: User, project: Project, *args: str) -> Any:
        proc = subprocess.run(
            [
                str(BAREMETAL),
                "--os-auth-type",
                "password",
                "--os-auth-url",
                ks.auth_url,
                "--os-username",
                user.name,
                "--os-password",
                user.password,
                "--os-project-name",
                project.name,
                "--os-user-domain-id",
                ks.domain_id,
                "--os-project-domain-id",
                ks.domain_id,
                *args,
                "-f",
                "json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )
        assert proc.returncode == 0, f"baremetal {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
        return json.loads(proc.stdout)

    listed = baremetal(world.owner_member, world.p_owner, "node", "list")
    assert [(n["uuid"], n["name"]) for n in listed] == [(nodes["n-owner"], "n-owner")]
    listed = baremetal(world.other_admin, world.p_other, "node", "list")
    assert [(n["uuid"], n["name"]) for n in listed] == [(nodes["n-other"], "n-other")]


# -- revocation ---------------------------------------------------------------------


def test_a_revoked_token_is_refused_when_it_is_not_cached(world: World, tmp_path: Path) -> None:
    """keystonemiddleware caches a validated token for ``token_cache_time`` seconds.

    With ``-1`` nothing is kept, so the revocation is seen at the next request.
    With the default (300 s, the module's stack) a token validated before its
    revocation keeps working until the cache lets it go: the window an
    operator accepts with caching, as in Ironic.
    """
    ks = world.keystone
    uncached = start_stack(
        keystone_settings(ks, f"sqlite:///{tmp_path}/uncached.sqlite", token_cache_time=-1)
    )
    try:
        token = ks.project_token(world.owner_member, world.p_owner)
        for client in (uncached.client, world.stack.client):
            response = client.get("/v1/nodes", headers=auth(token))
            assert response.status_code == 200, response.text

        ks.request(
            "DELETE",
            "/auth/tokens",
            token=ks.admin_token(),
            headers={"X-Subject-Token": token},
            expect=(204,),
        )

        refused = uncached.client.get("/v1/nodes", headers=auth(token))
        assert refused.status_code == 401, refused.text
        assert error_text(refused) == AUTH_REQUIRED
        cached = world.stack.client.get("/v1/nodes", headers=auth(token))
        assert cached.status_code == 200, cached.text
        # A fresh token of the same user still works on both.
        fresh = ks.project_token(world.owner_member, world.p_owner)
        assert uncached.client.get("/v1/nodes", headers=auth(fresh)).status_code == 200
    finally:
        uncached.stop()


def test_keystone_out_of_reach_is_503_not_401(world: World, tmp_path: Path) -> None:
    """A token that cannot be checked is not a bad token: clients retry a 503."""
    settings = keystone_settings(world.keystone, f"sqlite:///{tmp_path}/down.sqlite")
    dead = f"http://127.0.0.1:{free_port()}/v3"
    options = {**settings.keystone_authtoken, "auth_url": dead, "www_authenticate_uri": dead}
    down = start_stack(settings.model_copy(update={"keystone_authtoken": options}))
    try:
        token = world.keystone.project_token(world.owner_member, world.p_owner)
        response = down.client.get("/v1/nodes", headers=auth(token))
        assert response.status_code == 503, response.text
        assert error_text(response) == "The Keystone service is temporarily unavailable."
    finally:
        down.stop()


def test_the_harness_hands_out_tokens_of_the_scope_and_roles_asked(world: World) -> None:
    """The Keystone harness itself: the tests above trust the tokens it sets up, and if
    it handed out one with the wrong scope or roles they would prove nothing. Keystone's
    own validation (``GET /v3/auth/tokens``) is the judge here."""
    keystone = world.keystone
    assert keystone.auth_url == f"{keystone.url}/v3"
    assert keystone.admin.id
    assert keystone.admin_project.id

    p1 = keystone.create_project("p1")
    u1 = keystone.create_user("u1", "u1-secret")
    keystone.grant_project_role(u1, p1, "member")
    sys_reader = keystone.create_user("sys-reader", "reader-secret")
    keystone.grant_system_role(sys_reader, "reader")

    project_token = keystone.validate(keystone.project_token(u1, p1))
    assert project_token["user"]["id"] == u1.id
    assert project_token["project"]["id"] == p1.id
    assert "system" not in project_token
    # member implies reader, and nothing more.
    assert {r["name"] for r in project_token["roles"]} == {"member", "reader"}
    assert any(entry["type"] == "identity" for entry in project_token["catalog"])

    system_token = keystone.validate(keystone.system_token(sys_reader))
    assert system_token["user"]["id"] == sys_reader.id
    assert system_token["system"] == {"all": True}
    assert "project" not in system_token
    assert {r["name"] for r in system_token["roles"]} == {"reader"}

    # A scope the user holds no role on is refused, not silently narrowed.
    with pytest.raises(HttpError) as refused:
        keystone.system_token(u1)
    assert refused.value.status == 401
    with pytest.raises(HttpError) as refused:
        keystone.project_token(sys_reader, p1)
    assert refused.value.status == 401
