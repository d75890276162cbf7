"""The real clients against an ``http_basic`` metalforge: who may do what, as operators see it.

The ``baremetal`` CLI (python-ironicclient) runs as a subprocess with the
options an operator types (``--os-auth-type http_basic --os-username ...``)
or the matching ``OS_*`` environment variables, and openstacksdk is
connected with keystoneauth's ``http_basic`` plugin. The users are the
personas of ``tests.support.auth``: alice (system admin), bob (system
reader), carol (member of project ``p-owner``). Besides the allowed calls,
each refusal is checked as the client prints it (Ironic's 403 and 404
wording), and that the refused call changed nothing. One stack reads an
htpasswd file written by Apache's own ``htpasswd -B``; one serves HTTPS with
a certificate from a throwaway CA.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openstack
import pytest
import requests
from openstack import exceptions
from openstack.connection import Connection

from tests.clients.conftest import BAREMETAL, BaremetalCli, CliResult
from tests.conftest import IN_CI
from tests.support.auth import ADMIN, OWNER_MEMBER, READER, Persona, basic_auth_settings
from tests.support.stack import LiveServer, serving
from tests.support.tls import write_server_certificate

pytestmark = [
    pytest.mark.slow,
    # openstacksdk raises pending-deprecation warnings about its own internals on every call.
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning:openstack"),
]

WAIT = "60"
"""Seconds a ``--wait`` may take (the fake driver needs a few; the CLI polls every 10 s)."""
CA_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")
"""Variables that would make requests trust another CA than the one a test names."""


class AuthCli(BaremetalCli):
    """``baremetal`` with global options before every command, in a clean environment.

    Unlike the no-auth ``BaremetalCli`` nothing is preset: the test gives
    the authentication either as ``options`` or as ``OS_*`` variables in ``env``.
    """

    def __init__(
        self, url: str, options: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> None:
        if not BAREMETAL.exists():
            pytest.skip("python-ironicclient's `baremetal` is not installed in this environment")
        super().__init__(url)
        self.env = {
            k: v for k, v in self.env.items() if not k.startswith("OS_") and k not in CA_VARIABLES
        }
        self.env.update(env or {})
        self.options = tuple(options)

    def run(self, *args: str, ok: bool = True) -> CliResult:
        return super().run(*self.options, *args, ok=ok)


def basic_cli(
    server: LiveServer, persona: Persona, *, password: str | None = None, extra: Sequence[str] = ()
) -> AuthCli:
    """The CLI as ``persona`` with http_basic credentials given as command-line options."""
    secret = persona.password if password is None else password
    cli = AuthCli(
        server.url,
        (
            "--os-auth-type", "http_basic",
            "--os-username", persona.name,
            "--os-password", secret,
            "--os-endpoint", server.url,
            *extra,
        ),
    )  # fmt: skip
    token = base64.b64encode(f"{persona.name}:{secret}".encode()).decode()
    cli.headers = {"Authorization": f"Basic {token}"}
    return cli


@pytest.fixture
def server(sqlite_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """An http_basic metalforge where every persona of tests.support.auth can log in."""
    with serving(basic_auth_settings(sqlite_url, tmp_path)) as live:
        yield live


def wait_for(what: str, probe: Callable[[], Any], done: Callable[[Any], bool]) -> Any:
    """Poll ``probe`` until ``done`` holds for its result (the CLI's power has no --wait)."""
    deadline = time.monotonic() + 30
    while True:
        seen = probe()
        if done(seen):
            return seen
        assert time.monotonic() < deadline, f"{what} never happened; last seen: {seen}"
        time.sleep(0.5)


def has_row(table: str, uuid: str, name: str) -> bool:
    """Whether a ``node list`` table has the row of node ``uuid`` named ``name``."""
    return (
        re.search(rf"^\|\s*{uuid}\s*\|\s*{re.escape(name)}\s*\|", table, re.MULTILINE) is not None
    )


def create_node(admin: AuthCli, name: str, *options: str) -> str:
    """Enroll a fake-hardware node as ``admin``; its uuid."""
    node = admin.json("node", "create", "--driver", "fake-hardware", "--name", name, *options)
    assert node["name"] == name
    uuid: str = node["uuid"]
    return uuid


# -- 1. the system administrator -------------------------------------------------------------


def test_admin_runs_the_whole_lifecycle_with_options_and_environment(server: LiveServer) -> None:
    admin = basic_cli(server, ADMIN)
    uuid = create_node(admin, "auth-life")
    assert admin.json("node", "show", uuid, "--fields", "provision_state") == {
        "provision_state": "enroll"
    }

    waited = admin.run("node", "manage", "auth-life", "--wait", WAIT)
    assert "Waiting for provision state manageable" in waited.output
    assert admin.json("node", "show", "auth-life")["provision_state"] == "manageable"
    admin.run("node", "provide", "auth-life")
    admin.until_state("auth-life", "available")
    node = admin.json("node", "show", "auth-life")
    assert (node["provision_state"], node["power_state"]) == ("available", "power off")

    admin.run("node", "set", "auth-life", "--instance-info", "image_source=http://img/x.qcow2")
    admin.run("node", "deploy", "auth-life")
    admin.until_state("auth-life", "active")
    node = admin.json("node", "show", "auth-life")
    assert (node["provision_state"], node["power_state"]) == ("active", "power on")
    assert node["instance_info"]["image_source"] == "http://img/x.qcow2"
    admin.run("node", "undeploy", "auth-life")
    admin.until_state("auth-life", "available")
    node = admin.json("node", "show", "auth-life")
    assert (node["provision_state"], node["target_provision_state"]) == ("available", None)

    # The history says who asked: the http_basic user, not "noauth".
    history = admin.json("node", "history", "list", "auth-life", "--long")
    by_event = {entry["event"]: entry for entry in history}
    assert by_event["enroll -> verifying (manage)"]["user"] == "alice", history
    assert by_event["available -> deploying (active)"]["user"] == "alice", history
    assert by_event["active -> deleting (deleted)"]["user"] == "alice", history

    # The same credentials from the environment, as `export OS_...` in a shell; no options.
    from_env = AuthCli(
        server.url,
        env={
            "OS_AUTH_TYPE": "http_basic",
            "OS_USERNAME": ADMIN.name,
            "OS_PASSWORD": ADMIN.password,
            "OS_ENDPOINT": server.url,
        },
    )
    listed = from_env.run("node", "list").stdout
    assert has_row(listed, uuid, "auth-life"), listed
    assert "Deleted node auth-life" in from_env.run("node", "delete", "auth-life").stdout
    assert from_env.json("node", "list") == []
    assert f"Node {uuid} could not be found" in admin.error("node", "show", uuid)


# -- 2. the system reader ----------------------------------------------------------------------


def test_reader_lists_but_may_not_create_or_power(server: LiveServer) -> None:
    admin = basic_cli(server, ADMIN)
    uuid = create_node(admin, "seen")
    reader = basic_cli(server, READER)

    table = reader.run("node", "list").stdout
    assert has_row(table, uuid, "seen"), table
    assert [(n["uuid"], n["name"]) for n in reader.json("node", "list")] == [(uuid, "seen")]

    refused = reader.error("node", "create", "--driver", "fake-hardware", "--name", "not-mine")
    assert "Access was denied to the following resource: baremetal:node:create" in refused
    assert "(HTTP 403)" in refused
    refused = reader.error("node", "power", "on", "seen")
    assert "Access was denied to the following resource: baremetal:node:set_power_state" in refused
    assert "(HTTP 403)" in refused

    # Nothing happened: no second node, and the node's power was never asked for.
    assert [n["name"] for n in admin.json("node", "list")] == ["seen"]
    assert admin.json("node", "show", "seen", "--fields", "power_state", "target_power_state") == {
        "power_state": None,
        "target_power_state": None,
    }


# -- 3. a member of the project owning a node --------------------------------------------------


def test_project_member_sees_and_drives_only_its_projects_node(server: LiveServer) -> None:
    admin = basic_cli(server, ADMIN)
    own = create_node(admin, "own", "--owner", "p-owner", "--driver-info", "fake_address=10.0.0.9")
    other = create_node(admin, "other", "--owner", "p-other")
    member = basic_cli(server, OWNER_MEMBER)

    table = member.run("node", "list").stdout
    assert has_row(table, own, "own"), table
    assert other not in table, table
    assert "other" not in table, table
    assert [(n["uuid"], n["name"]) for n in member.json("node", "list")] == [(own, "own")]

    # Another project's node does not exist for carol: 404, by name or uuid, even to power it.
    assert "Node other could not be found. (HTTP 404)" in member.error("node", "show", "other")
    assert f"Node {other} could not be found. (HTTP 404)" in member.error("node", "show", other)
    assert "Node other could not be found. (HTTP 404)" in member.error(
        "node", "power", "on", "other"
    )
    assert member.json("node", "show", "own")["uuid"] == own

    member.run("node", "power", "on", "own")
    wait_for(
        "carol's power on",
        lambda: member.json("node", "show", "own", "--fields", "power_state", "target_power_state"),
        lambda shown: shown == {"power_state": "power on", "target_power_state": None},
    )

    # The history names carol and her project as the one who asked.
    [asked] = [
        entry
        for entry in admin.json("node", "history", "list", "own", "--long")
        if entry["event"] == "power power on requested"
    ]
    assert "carol" in asked["user"], asked
    assert "p-owner" in f"{asked['user']} {asked['project']}", asked

    refused = member.error("node", "set", "own", "--driver-info", "foo=bar")
    assert (
        "Access was denied to the following resource: baremetal:node:update:driver_info" in refused
    )
    assert "(HTTP 403)" in refused
    assert admin.json("node", "show", "own")["driver_info"] == {"fake_address": "10.0.0.9"}
    # The other node was never touched.
    assert admin.json("node", "show", "other", "--fields", "power_state") == {"power_state": None}


# -- 4. wrong and missing credentials ----------------------------------------------------------


def test_wrong_or_missing_credentials_are_refused(server: LiveServer) -> None:
    admin = basic_cli(server, ADMIN)
    uuid = create_node(admin, "guarded")

    wrong = basic_cli(server, ADMIN, password="not-alice-password").error("node", "list")
    assert "Incorrect username or password (HTTP 401)" in wrong
    assert uuid not in wrong
    unknown = basic_cli(server, Persona("mallory", ())).error("node", "list")
    assert "Incorrect username or password (HTTP 401)" in unknown
    wrong_env = AuthCli(
        server.url,
        env={
            "OS_AUTH_TYPE": "http_basic",
            "OS_USERNAME": ADMIN.name,
            "OS_PASSWORD": "not-alice-password",
            "OS_ENDPOINT": server.url,
        },
    ).error("node", "show", "guarded")
    assert "Incorrect username or password (HTTP 401)" in wrong_env
    # No credentials at all: the CLI in no-auth mode, as against an unprotected Ironic.
    anonymous = AuthCli(server.url, ("--os-auth-type", "none", "--os-endpoint", server.url))
    assert "Authorization required (HTTP 401)" in anonymous.error("node", "list")

    # Raw HTTP: version discovery is public, everything else asks for Basic credentials.
    root = requests.get(f"{server.url}/", timeout=10)
    assert root.status_code == 200
    assert root.json()["default_version"]["id"] == "v1"
    v1 = requests.get(f"{server.url}/v1", timeout=10)
    assert v1.status_code == 200
    assert v1.json()["id"] == "v1"
    for path in ("/v1/nodes", "/nodes", f"/v1/nodes/{uuid}"):
        refused = requests.get(f"{server.url}{path}", timeout=10)
        assert refused.status_code == 401, (path, refused.text)
        assert refused.headers["WWW-Authenticate"] == 'Basic realm="Baremetal API"'
        assert "Authorization required" in refused.text
        assert uuid not in refused.text
    bad = requests.get(f"{server.url}/v1/nodes", auth=("alice", "nope"), timeout=10)
    assert bad.status_code == 401
    assert bad.headers["WWW-Authenticate"] == 'Basic realm="Baremetal API"'
    assert "Incorrect username or password" in bad.text
    good = requests.get(f"{server.url}/v1/nodes", auth=(ADMIN.name, ADMIN.password), timeout=10)
    assert good.status_code == 200
    assert [n["uuid"] for n in good.json()["nodes"]] == [uuid]


# -- 5. openstacksdk ---------------------------------------------------------------------------


@contextmanager
def sdk(
    url: str, persona: Persona, *, password: str | None = None, **options: Any
) -> Iterator[Connection]:
    """openstacksdk with keystoneauth's ``http_basic`` plugin, configured by arguments only."""
    connection = openstack.connect(
        load_yaml_config=False,
        load_envvars=False,
        auth_type="http_basic",
        auth={
            "username": persona.name,
            "password": persona.password if password is None else password,
            "endpoint": url,
        },
        **options,
    )
    try:
        yield connection
    finally:
        connection.close()
        # close() leaves keystoneauth's connection pool open; an idle TLS connection then
        # holds up the server's shutdown (asyncio waits for the client's close_notify).
        connection.session.session.close()


def test_openstacksdk_with_http_basic(server: LiveServer) -> None:
    with sdk(server.url, ADMIN) as admin:
        bm = admin.baremetal
        discovered = bm.get_endpoint_data()
        assert discovered is not None
        assert discovered.max_microversion == (1, 115)
        own = bm.create_node(driver="fake-hardware", name="sdk-own", owner="p-owner")
        other = bm.create_node(driver="fake-hardware", name="sdk-other", owner="p-other")
        listed = {(n.id, n.name) for n in bm.nodes()}
        assert listed == {(own.id, "sdk-own"), (other.id, "sdk-other")}

    with sdk(server.url, OWNER_MEMBER) as member:
        bm = member.baremetal
        assert [(n.id, n.name) for n in bm.nodes()] == [(own.id, "sdk-own")]
        assert [n.owner for n in bm.nodes(details=True)] == ["p-owner"]
        with pytest.raises(exceptions.NotFoundException, match="could not be found"):
            bm.get_node(other.id)
        with pytest.raises(exceptions.ForbiddenException, match="baremetal:node:create"):
            bm.create_node(driver="fake-hardware", name="sdk-mine")

    # The form metalforge's start-up banner suggests: plugin options as keyword arguments.
    banner = openstack.connect(
        load_yaml_config=False,
        load_envvars=False,
        auth_type="http_basic",
        endpoint=server.url,
        username=READER.name,
        password=READER.password,
    )
    try:
        assert {n.name for n in banner.baremetal.nodes()} == {"sdk-own", "sdk-other"}
    finally:
        banner.close()
        banner.session.session.close()

    with sdk(server.url, ADMIN, password="not-alice-password") as refused:
        with pytest.raises(exceptions.HttpException, match="Incorrect username or password") as err:
            list(refused.baremetal.nodes())
        assert err.value.status_code == 401


# -- 6. HTTPS ----------------------------------------------------------------------------------


def test_https_with_a_private_ca(sqlite_url: str, tmp_path: Path) -> None:
    tls = write_server_certificate(tmp_path)
    settings = basic_auth_settings(
        sqlite_url, tmp_path, tls_cert_file=tls.cert, tls_key_file=tls.key
    )
    with serving(settings) as server:
        assert server.url.startswith("https://127.0.0.1:")
        trusted = basic_cli(server, ADMIN, extra=("--os-cacert", str(tls.ca_cert)))
        uuid = create_node(trusted, "over-tls")
        listed = trusted.run("node", "list").stdout
        assert has_row(listed, uuid, "over-tls"), listed

        untrusted = basic_cli(server, ADMIN).error("node", "list")
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted, untrusted
        assert uuid not in untrusted

        # Version discovery over HTTPS links back to HTTPS. (Connection: close, because the
        # socket of a response lives until the garbage collector frees it, and an idle TLS
        # connection holds up the server's shutdown for 10 s.)
        root = requests.get(
            f"{server.url}/", verify=str(tls.ca_cert), headers={"Connection": "close"}, timeout=10
        )
        assert root.status_code == 200
        hrefs = [link["href"] for link in root.json()["default_version"]["links"]]
        assert hrefs, root.text
        assert all(h.startswith(f"{server.url}/") for h in hrefs), hrefs

        with sdk(server.url, OWNER_MEMBER, cacert=str(tls.ca_cert)) as member:
            assert list(member.baremetal.nodes()) == []
        with sdk(server.url, ADMIN, cacert=str(tls.ca_cert)) as admin:
            assert [n.id for n in admin.baremetal.nodes()] == [uuid]


# -- the htpasswd file from Apache's own tool --------------------------------------------------


def _htpasswd(*args: str, password: str | None = None) -> None:
    """Run Debian's ``htpasswd`` (apache2-utils); the password on stdin (``-i``), not argv."""
    found = shutil.which("htpasswd")
    if found is None:
        if IN_CI:
            raise RuntimeError("htpasswd is missing: tools/ensure-system-packages.sh test")
        pytest.skip("htpasswd (Debian's apache2-utils) is not installed")
    subprocess.run(
        [found, *args],
        input=None if password is None else password + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )


def test_users_from_apache_htpasswd(sqlite_url: str, tmp_path: Path) -> None:
    users = tmp_path / "apache-htpasswd"
    _htpasswd("-B", "-c", "-i", str(users), ADMIN.name, password=ADMIN.password)
    assert users.read_text().startswith(f"{ADMIN.name}:$2y$")
    settings = basic_auth_settings(sqlite_url, tmp_path, http_basic_auth_user_file=users)
    with serving(settings) as server:
        admin = basic_cli(server, ADMIN)
        uuid = create_node(admin, "apache", "--owner", "p-owner")
        assert "Incorrect username or password (HTTP 401)" in basic_cli(
            server, ADMIN, password="not-alice-password"
        ).error("node", "list")

        # carol has roles in the settings but no entry in the file yet.
        member = basic_cli(server, OWNER_MEMBER)
        assert "Incorrect username or password (HTTP 401)" in member.error("node", "list")
        _htpasswd("-B", "-i", str(users), OWNER_MEMBER.name, password=OWNER_MEMBER.password)
        assert [n["uuid"] for n in member.json("node", "list")] == [uuid]

        # An entry in htpasswd's default format (MD5, $apr1$) makes the whole file unusable:
        # the version before it stays in force, so mallory is refused and carol still works.
        mallory = Persona("mallory", ())
        _htpasswd("-m", "-i", str(users), mallory.name, password=mallory.password)
        assert f"{mallory.name}:$apr1$" in users.read_text()
        assert "Incorrect username or password (HTTP 401)" in basic_cli(server, mallory).error(
            "node", "list"
        )
        assert [n["uuid"] for n in member.json("node", "list")] == [uuid]
        # Re-added with bcrypt, mallory can log in, but has no role in the settings: 403.
        _htpasswd("-B", "-i", str(users), mallory.name, password=mallory.password)
        refused = basic_cli(server, mallory).error("node", "list")
        assert "Access was denied to the following resource: baremetal:node:list" in refused
        assert "(HTTP 403)" in refused
        assert uuid not in refused

        # Removed from the file, carol is refused at once, without a restart.
        _htpasswd("-D", str(users), OWNER_MEMBER.name)
        assert "Incorrect username or password (HTTP 401)" in member.error("node", "list")
        assert [n["uuid"] for n in admin.json("node", "list")] == [uuid]
