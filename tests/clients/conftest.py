"""Fixtures that point the real OpenStack clients at a live metalforge.

The clients are the point of these tests: they are run exactly as an operator
would run them (the ``baremetal`` CLI as a subprocess, openstacksdk through
``openstack.connect``), in standalone no-auth mode, against the all-in-one
service listening on a real port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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

    def __init__(self, prefix: list[str], env: dict[str, str], timeout: float = CLI_TIMEOUT):
        self.prefix = prefix
        self.timeout = timeout
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        self.env.update(OS_AUTH_TYPE="none", **env)

    def run(self, *args: str, ok: bool = True) -> CliResult:
        """Run one command; with ``ok`` the command must succeed, else it must fail."""
        proc = subprocess.run(
            [*self.prefix, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=self.timeout,
            check=False,
        )
        result = CliResult(proc.returncode, proc.stdout, proc.stderr)
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

    def __init__(self, url: str) -> None:
        super().__init__([str(BAREMETAL)], {"OS_ENDPOINT": url})
        self.url = url

    def until_state(self, node: str, state: str, timeout: float = 60.0) -> None:
        """Poll ``node show`` until ``node`` rests in ``state``.

        For the verbs a test runs only to get somewhere: the CLI's own
        ``--wait`` checks long actions (provide, deploy, undeploy, clean)
        every 10 s, which ``test_node_lifecycle_with_wait`` proves once.
        """
        deadline = time.monotonic() + timeout
        fields = ("provision_state", "target_provision_state", "last_error")
        while True:
            shown = self.json("node", "show", node, "--fields", *fields)
            if (shown["provision_state"], shown["target_provision_state"]) == (state, None):
                return
            assert not shown["provision_state"].endswith("failed"), shown
            assert time.monotonic() < deadline, f"{node} never reached {state}: {shown}"
            time.sleep(0.2)


@pytest.fixture
def cli(live_server: LiveServer) -> BaremetalCli:
    if not BAREMETAL.exists():
        pytest.skip("python-ironicclient's `baremetal` is not installed in this environment")
    return BaremetalCli(live_server.url)
