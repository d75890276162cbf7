"""Fixtures that point the real OpenStack clients at a live metalforge.

The clients are the point of these tests: they are run as an operator would
run them (the ``baremetal`` CLI as a process of its own, openstacksdk through
``openstack.connect``), in standalone no-auth mode, against the all-in-one
service listening on a real port. Each command is a process forked from one
that imported the client libraries once (``tests.support.console_scripts``);
``Cli(..., fork=False)`` runs the installed script file itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import LATEST, wait_until
from tests.support.console_scripts import run_script
from tests.support.stack import LiveServer

BAREMETAL = Path(sys.executable).with_name("baremetal")
CLI_TIMEOUT = 120.0
"""Seconds one CLI call may take: ``--wait 60`` plus ironicclient's 409 retries."""


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class Cli:
    """Runs one OpenStack command line with a clean environment.

    Every ``OS_*`` variable of the calling environment is dropped so that a
    developer's own cloud settings (``OS_CLOUD``, tokens) cannot leak into the
    test; only no-auth mode and what ``env`` adds remain.
    """

    def __init__(
        self,
        prefix: list[str],
        env: dict[str, str],
        timeout: float = CLI_TIMEOUT,
        *,
        fork: bool = True,
    ):
        self.prefix = prefix
        self.timeout = timeout
        self.fork = fork
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        self.env.update(OS_AUTH_TYPE="none", **env)

    def run(self, *args: str, ok: bool = True) -> CliResult:
        """Run one command; with ``ok`` the command must succeed, else it must fail."""
        script, *options = self.prefix
        done = run_script(Path(script), [*options, *args], self.env, self.timeout, fork=self.fork)
        result = CliResult(done.returncode, done.stdout, done.stderr)
        command = " ".join([Path(self.prefix[0]).name, *self.prefix[1:], *args])
        if ok:
            assert result.returncode == 0, f"`{command}` failed:\n{result.output}"
        else:
            assert result.returncode != 0, f"`{command}` succeeded:\n{result.output}"
        return result

    def json(self, *args: str) -> Any:
        """Run a command with ``-f json`` and decode what it printed."""
        return json.loads(self.run(*args, "-f", "json").stdout)

    def error(self, *args: str) -> str:
        """The message a failing command printed (stderr and stdout together)."""
        return self.run(*args, ok=False).output


class BaremetalCli(Cli):
    """``baremetal`` in standalone no-auth mode against one server."""

    def __init__(self, url: str, *, fork: bool = True) -> None:
        super().__init__([str(BAREMETAL)], {"OS_ENDPOINT": url}, fork=fork)
        self.url = url
        self.headers: dict[str, str] = {}
        """What an HTTP read of this server needs besides the version (credentials)."""

    def until(
        self,
        node: str,
        fields: Sequence[str],
        done: Callable[[dict[str, Any]], bool],
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Read ``node``'s ``fields`` until ``done`` says so; what ``node show`` then prints.

        The waiting reads the API directly: each CLI call is a Python process
        that imports the OpenStack client libraries, and a loop of them is
        most of what a client test would cost. The CLI shows the final state
        once, so the operator's view is still what is checked.
        """
        if self.url.startswith("http://"):
            url = f"{self.url}/v1/nodes/{node}?fields={','.join(fields)}"
            request_headers = {**LATEST, **self.headers}

            def read() -> dict[str, Any] | None:
                request = urllib.request.Request(url, headers=request_headers)
                with urllib.request.urlopen(request, timeout=10) as response:
                    shown: dict[str, Any] = json.loads(response.read())
                return shown if done(shown) else None

            wait_until(f"{node} to show {list(fields)} as wanted", read, timeout=timeout)
        else:  # TLS: the CLI knows the CA, urllib here does not
            deadline = time.monotonic() + timeout
            while not done(self.json("node", "show", node, "--fields", *fields)):
                assert time.monotonic() < deadline, f"{node} never showed {list(fields)} as wanted"
                time.sleep(0.3)
        shown: dict[str, Any] = self.json("node", "show", node, "--fields", *fields)
        assert done(shown), shown
        return shown

    def until_state(self, node: str, state: str, timeout: float = 60.0) -> None:
        """Until ``node`` rests in ``state``, failing at once if it ends in a failure state.

        For the verbs a test runs only to get somewhere: the CLI's own
        ``--wait`` checks long actions (provide, deploy, undeploy, clean)
        every 10 s, which ``test_node_lifecycle_with_wait`` proves once.
        """

        def rests(shown: dict[str, Any]) -> bool:
            assert not shown["provision_state"].endswith("failed"), shown
            return (shown["provision_state"], shown["target_provision_state"]) == (state, None)

        fields = ("provision_state", "target_provision_state", "last_error")
        self.until(node, fields, rests, timeout)

    def until_power(self, node: str, state: str, timeout: float = 30.0) -> None:
        """Until ``node``'s power change is done (``node power`` has no ``--wait``)."""
        wanted = {"power_state": state, "target_power_state": None}

        def reached(shown: dict[str, Any]) -> bool:
            return {key: shown.get(key) for key in wanted} == wanted

        self.until(node, tuple(wanted), reached, timeout)


@pytest.fixture
def cli(live_server: LiveServer) -> BaremetalCli:
    if not BAREMETAL.exists():
        pytest.skip("python-ironicclient's `baremetal` is not installed in this environment")
    return BaremetalCli(live_server.url)


@pytest.fixture
def script_cli(live_server: LiveServer) -> BaremetalCli:
    """The installed ``baremetal`` script file itself: a new interpreter for every command."""
    if not BAREMETAL.exists():
        pytest.skip("python-ironicclient's `baremetal` is not installed in this environment")
    return BaremetalCli(live_server.url, fork=False)
