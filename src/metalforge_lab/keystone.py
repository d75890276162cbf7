"""A real OpenStack Keystone on loopback, started and stopped by the tests and ``make conformance``.

Token validation is only proven against the real thing: the scopes, the
implied roles and the token format are Keystone's, not what a fake thinks
they are. Keystone runs from its own virtualenv (``.keystone-venv``, built by
``make test`` from ``tools/keystone-requirements.txt``) so its OpenStack
dependencies never mix with metalforge's, served by gunicorn, with every file
it reads or writes (configuration, SQLite database, fernet and credential
keys, log) in the test's temporary directory.

``running_keystone(tmp_path)`` bootstraps one (an ``admin`` user holding the
``admin`` role on the ``admin`` project and on the system; roles ``reader``,
``member``, ``manager``, ``admin`` and ``service``, where ``admin`` implies
``manager`` implies ``member`` implies ``reader``) and hands out a
``Keystone`` to create projects, users and role assignments and to issue
project- and system-scoped tokens through the v3 API.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from metalforge_lab.http_errors import HttpError
from metalforge_lab.ports import free_port

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 120.0
"""Seconds Keystone gets to answer: it imports a large OpenStack stack, slow on 2 busy cores."""
COMMAND_TIMEOUT = 120.0
"""Seconds each ``keystone-manage`` step gets, for the same reason."""
REQUEST_TIMEOUT = 30.0
DEFAULT_DOMAIN = "default"
REGION = "RegionOne"


def keystone_venv() -> Path:
    """``$KEYSTONE_VENV`` (the Makefile's variable, from the checkout), else ``.keystone-venv``.

    ``make test KEYSTONE_VENV=...`` puts the variable in the tests' environment
    too, so the harness uses the virtualenv the Makefile built.
    """
    return REPO / os.environ.get("KEYSTONE_VENV", ".keystone-venv")


def missing_keystone() -> str | None:
    for tool in ("keystone-manage", "gunicorn"):
        if not os.access(keystone_venv() / "bin" / tool, os.X_OK):
            return (
                f"no {tool} in {keystone_venv()} "
                "(make .keystone-venv/.installed-stamp, or make test)"
            )
    return None


class KeystoneMissing(RuntimeError):
    """Keystone's virtualenv is not built; the message says how to build it."""


@dataclass(frozen=True)
class User:
    """A Keystone user in the default domain, with the password it authenticates with."""

    id: str
    name: str
    password: str


@dataclass(frozen=True)
class Project:
    id: str
    name: str


class Keystone:
    """Client side of one running Keystone: administration and tokens over the v3 API.

    ``url`` is the versionless root (the public endpoint in the catalog);
    ``auth_url`` is ``url + "/v3"``, what ``keystonemiddleware`` and
    ``keystoneauth1`` want as ``auth_url``. ``admin`` and ``admin_project``
    are the bootstrap credentials.
    """

    def __init__(self, url: str, admin_password: str) -> None:
        self.url = url
        self.auth_url = f"{url}/v3"
        self.region = REGION
        self.domain_id = DEFAULT_DOMAIN
        self._session = requests.Session()
        self._admin_token: str | None = None
        self._role_ids: dict[str, str] = {}
        # Names are enough to authenticate; the ids come from Keystone itself.
        self.admin = User(id="", name="admin", password=admin_password)
        self.admin = User(
            id=self.validate(self.admin_token())["user"]["id"],
            name="admin",
            password=admin_password,
        )
        found = self._admin("GET", "/projects?name=admin")["projects"]
        self.admin_project = Project(id=found[0]["id"], name="admin")

    def close(self) -> None:
        self._session.close()

    # --- plumbing ---------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        expect: tuple[int, ...] = (200,),
    ) -> requests.Response:
        """One call to ``auth_url + path``; raises ``HttpError`` on any other status."""
        sent = dict(headers or {})
        if token is not None:
            sent["X-Auth-Token"] = token
        response = self._session.request(
            method,
            f"{self.auth_url}{path}",
            json=body,
            headers=sent,
            timeout=REQUEST_TIMEOUT,
        )
        if response.status_code not in expect:
            raise HttpError(response.status_code, f"{method} {path}: {response.text}")
        return response

    def admin_token(self) -> str:
        """A system-scoped admin token, issued once (tokens live an hour, longer than a test)."""
        if self._admin_token is None:
            self._admin_token = self.system_token(self.admin)
        return self._admin_token

    def _admin(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        response = self.request(method, path, body, token=self.admin_token(), **kwargs)
        return response.json() if response.content else None

    # --- administration ---------------------------------------------------

    def create_project(self, name: str) -> Project:
        created = self._admin(
            "POST",
            "/projects",
            {"project": {"name": name, "domain_id": self.domain_id, "enabled": True}},
            expect=(201,),
        )["project"]
        return Project(id=created["id"], name=created["name"])

    def create_user(self, name: str, password: str) -> User:
        created = self._admin(
            "POST",
            "/users",
            {
                "user": {
                    "name": name,
                    "password": password,
                    "domain_id": self.domain_id,
                    "enabled": True,
                }
            },
            expect=(201,),
        )["user"]
        return User(id=created["id"], name=created["name"], password=password)

    def role_id(self, name: str) -> str:
        """The id of role ``name`` (``admin``, ``manager``, ``member``, ``reader``, ``service``)."""
        if name not in self._role_ids:
            roles = self._admin("GET", f"/roles?name={name}")["roles"]
            if len(roles) != 1:
                raise LookupError(f"Keystone has {len(roles)} roles named {name!r}")
            self._role_ids[name] = roles[0]["id"]
        return self._role_ids[name]

    def grant_project_role(self, user: User, project: Project, role: str) -> None:
        """``user`` gets ``role`` on ``project`` (and every role it implies, in its tokens)."""
        self._admin(
            "PUT",
            f"/projects/{project.id}/users/{user.id}/roles/{self.role_id(role)}",
            expect=(204,),
        )

    def grant_system_role(self, user: User, role: str) -> None:
        """``user`` gets ``role`` on the whole deployment (system scope ``all``)."""
        self._admin("PUT", f"/system/users/{user.id}/roles/{self.role_id(role)}", expect=(204,))

    # --- tokens -----------------------------------------------------------

    def _issue(self, user: User, scope: Mapping[str, Any]) -> str:
        body = {
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {
                            "name": user.name,
                            "domain": {"id": self.domain_id},
                            "password": user.password,
                        }
                    },
                },
                "scope": dict(scope),
            }
        }
        response = self.request("POST", "/auth/tokens", body, expect=(201,))
        return response.headers["X-Subject-Token"]

    def project_token(self, user: User, project: Project) -> str:
        """A token of ``user`` scoped to ``project``: what a tenant's client sends."""
        return self._issue(user, {"project": {"id": project.id}})

    def system_token(self, user: User) -> str:
        """A token of ``user`` scoped to the system (``{"system": {"all": true}}``): an operator's.

        ``user`` needs a role on the system (``grant_system_role``), else Keystone answers 401.
        """
        return self._issue(user, {"system": {"all": True}})

    def validate(self, token: str) -> dict[str, Any]:
        """Keystone's own view of ``token`` (``GET /v3/auth/tokens``, as the admin)."""
        body = self._admin("GET", "/auth/tokens", headers={"X-Subject-Token": token})
        return dict(body["token"])


def _config(workdir: Path, *, enforce_scope: bool = True) -> str:
    # enforce_scope and enforce_new_defaults are what current deployments run
    # with (and oslo.policy's defaults now): pinned so that a library default
    # changing back cannot let a wrongly scoped token pass in the tests.
    # tools/conformance.py turns enforce_scope off: tempest's admin creates
    # users, projects and system role assignments with a project-scoped token.
    # password_hash_rounds = 4 is bcrypt's minimum: every user creation and
    # password check is then milliseconds instead of a quarter second of CPU.
    return f"""\
[DEFAULT]
debug = false
use_stderr = true

[database]
connection = sqlite:///{workdir / "keystone.sqlite"}

[fernet_tokens]
key_repository = {workdir / "fernet-keys"}

[fernet_receipts]
key_repository = {workdir / "fernet-keys"}

[credential]
key_repository = {workdir / "credential-keys"}

[identity]
password_hash_rounds = 4

[oslo_policy]
enforce_scope = {"true" if enforce_scope else "false"}
enforce_new_defaults = true
"""


def _gunicorn_config(port: int, threads: int) -> str:
    # Everything is in this file because the WSGI process must have no
    # command-line arguments: Keystone's oslo.config parses sys.argv and
    # stops at gunicorn's. The control socket would otherwise be shared in
    # $HOME by every gunicorn on the machine. The worker timeout covers the
    # worker importing Keystone on a loaded machine. SQLite takes one writer at a
    # time: threads that write at once get "database is locked" (a 500).
    return f"""\
wsgi_app = "keystone.wsgi.api:application"
bind = "127.0.0.1:{port}"
workers = 1
worker_class = "gthread"
threads = {threads}
timeout = {int(STARTUP_TIMEOUT)}
graceful_timeout = 5
control_socket_disable = True
errorlog = "-"
accesslog = "-"
"""


def _environment(workdir: Path) -> dict[str, str]:
    """The caller's environment without OpenStack settings, plus where Keystone's config is.

    ``OS_*`` variables (``OS_AUTH_URL``, ``OS_CLOUD``, oslo.config's
    ``OS_<GROUP>__<OPTION>`` overrides) from a developer's shell would change
    what Keystone does or which cloud a client talks to.
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "GUNICORN_"))}
    return {
        **base,
        "PYTHONUNBUFFERED": "1",
        # keystone.wsgi.api reads its configuration from these, nothing else.
        "OS_KEYSTONE_CONFIG_DIR": str(workdir),
        "OS_KEYSTONE_CONFIG_FILES": "keystone.conf",
        "GUNICORN_CMD_ARGS": f"--config {workdir / 'gunicorn.conf.py'}",
    }


def _manage(workdir: Path, env: Mapping[str, str], log_path: Path, *args: str) -> None:
    """One ``keystone-manage`` step on the temporary configuration; fails loudly with its output.

    The output also goes to ``log_path``, ahead of the server's, for the whole story.
    """
    argv = [
        str(keystone_venv() / "bin" / "keystone-manage"),
        "--config-file",
        str(workdir / "keystone.conf"),
        *args,
    ]
    done = subprocess.run(
        argv,
        env=dict(env),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    with log_path.open("a") as log:
        log.write(f"----- keystone-manage {' '.join(args)} -----\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        raise RuntimeError(
            f"keystone-manage {args[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: float) -> None:
    """Until ``GET /v3`` answers 200: the worker has imported Keystone and read its config."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"keystone (gunicorn) exited with {proc.returncode}")
        try:
            if requests.get(f"{url}/v3", timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"keystone did not answer on {url}/v3 within {timeout:.0f}s")


def _stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM the gunicorn master (it stops its worker), then SIGKILL the whole group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    # The worker is in the master's session and group: a killed master must not leave it behind.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@contextlib.contextmanager
def running_keystone(
    tmp_path: Path,
    *,
    admin_password: str = "admin-secret",
    timeout: float = STARTUP_TIMEOUT,
    enforce_scope: bool = True,
    threads: int = 4,
) -> Iterator[Keystone]:
    """A bootstrapped Keystone on a free loopback port, stopped when the block ends.

    Raises ``KeystoneMissing`` when ``.keystone-venv`` is not built. Its files are in
    ``tmp_path / "keystone"``; ``keystone.log`` there has its output, printed
    when the block raised, since it is the only trace of what Keystone did.
    ``enforce_scope=False`` relaxes Keystone's own policy on scopes (not the
    tokens it issues), as ``make conformance`` needs; ``threads=1`` serves one
    request at a time, for clients that write in parallel (tempest creating
    users from two workers).
    """
    reason = missing_keystone()
    if reason is not None:
        raise KeystoneMissing(reason)
    started = time.monotonic()
    workdir = tmp_path / "keystone"
    workdir.mkdir(parents=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "keystone.log"
    (workdir / "keystone.conf").write_text(_config(workdir, enforce_scope=enforce_scope))
    (workdir / "gunicorn.conf.py").write_text(_gunicorn_config(port, threads))
    env = _environment(workdir)

    _manage(workdir, env, log_path, "db_sync")
    # Key repositories owned by whoever runs the tests (root or not): Keystone runs as them too.
    owner = ("--keystone-user", str(os.geteuid()), "--keystone-group", str(os.getegid()))
    for setup in ("fernet_setup", "credential_setup"):
        _manage(workdir, env, log_path, setup, *owner)
    _manage(
        workdir,
        env,
        log_path,
        "bootstrap",
        "--bootstrap-username",
        "admin",
        "--bootstrap-password",
        admin_password,
        "--bootstrap-project-name",
        "admin",
        "--bootstrap-role-name",
        "admin",
        "--bootstrap-service-name",
        "keystone",
        "--bootstrap-region-id",
        REGION,
        "--bootstrap-public-url",
        url,
    )

    bootstrapped = time.monotonic()

    keystone: Keystone | None = None
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [str(keystone_venv() / "bin" / "gunicorn")],
            env=env,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session: a Ctrl-C meant for the caller must not reach it first.
            start_new_session=True,
        )
    try:
        _wait_ready(proc, url, timeout)
        print(
            f"keystone on {url}: set up in {bootstrapped - started:.1f}s, "
            f"answered {time.monotonic() - bootstrapped:.1f}s later"
        )
        keystone = Keystone(url, admin_password)
        yield keystone
    except BaseException:  # any failure, a Ctrl-C included: show what Keystone logged, re-raise
        print(f"----- keystone log ({log_path}) -----")
        print(log_path.read_text(errors="replace"))
        raise
    finally:
        if keystone is not None:
            keystone.close()
        _stop(proc)
