"""Real ``metalforge`` processes for multi-process tests: start, wait, stop, kill.

Only a real process shows what a crash does: a SIGKILLed conductor leaves its
reservation, its claimed work items and its database connections exactly as
they were, with no ``finally`` block run. Every process writes its output to
a log file; ``ProcessGroup`` kills whatever is left when the test ends and
prints the logs when it failed, since those are the only trace of what the
processes did.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from metalforge_lab.http_errors import HttpError
from metalforge_lab.ports import free_port

LATEST = {"X-OpenStack-Ironic-API-Version": "latest"}
STARTUP_TIMEOUT = 30.0
"""Seconds a process gets to become ready; imports alone take a few on a busy machine."""


def http(
    method: str,
    url: str,
    body: Any = None,
    *,
    expect: tuple[int, ...] = (200,),
    timeout: float = 10,
) -> Any:
    """One JSON request with the stdlib (no client library ties the test to a version)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {**LATEST, "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    if status not in expect:
        raise HttpError(status, raw.decode(errors="replace"))
    return json.loads(raw) if raw else None


class ServiceProcess:
    """One ``metalforge`` subprocess with its output in ``log_path``."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.inspector_port: int | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C meant for pytest must not reach it first.
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup runs, as when a machine dies."""
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (graceful), then SIGKILL if it does not exit in ``timeout`` seconds."""
        if not self.running():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_http(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Until the API answers its root document (or the process died)."""
        assert self.url is not None, f"{self.name} serves no HTTP"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"{self.name} exited with {self.proc and self.proc.returncode}")
            try:
                http("GET", f"{self.url}/", timeout=1)
                return
            except (OSError, HttpError):
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer on {self.url} within {timeout:.0f}s")


class ProcessGroup:
    """The processes of one test: ``with ProcessGroup(...) as group:`` always cleans up.

    ``config`` is a TOML file every process reads; ``env`` adds ``METALFORGE_*``
    variables on top (per process settings such as the hostname or the port).
    """

    def __init__(self, workdir: Path, config: Path, env: Mapping[str, str] | None = None) -> None:
        self.workdir = workdir
        self.config = config
        # The caller's METALFORGE_* variables would silently change what is tested.
        base = {k: v for k, v in os.environ.items() if not k.startswith("METALFORGE_")}
        self.env = {**base, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.processes: list[ServiceProcess] = []

    def _argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "metalforge.cli", "--config", str(self.config), *args]

    def run(self, *args: str, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> str:
        """Run a one-shot command (``db upgrade``) and return its output; fails loudly."""
        result = subprocess.run(
            self._argv(*args),
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"metalforge {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result.stdout

    def spawn(self, name: str, role: str, env: Mapping[str, str]) -> ServiceProcess:
        process = ServiceProcess(
            name,
            self._argv(role),
            {**self.env, **env},
            self.workdir / f"{name}.log",
        )
        self.processes.append(process)
        process.start()
        return process

    def start_api(self, name: str, port: int | None = None) -> ServiceProcess:
        """``metalforge api`` on a free loopback port; returns at once (then ``wait_http``)."""
        port = port or free_port()
        inspector_port = free_port()
        process = self.spawn(
            name,
            "api",
            {
                "METALFORGE_API__HOST": "127.0.0.1",
                "METALFORGE_API__PORT": str(port),
                "METALFORGE_INSPECTOR__PORT": str(inspector_port),
            },
        )
        process.url = f"http://127.0.0.1:{port}"
        process.inspector_port = inspector_port
        return process

    def start_conductor(self, hostname: str) -> ServiceProcess:
        return self.spawn(hostname, "conductor", {"METALFORGE_CONDUCTOR__HOSTNAME": hostname})

    def wait_for_conductors(
        self, api_url: str, hostnames: list[str], timeout: float = STARTUP_TIMEOUT
    ) -> None:
        """Until the API lists every one of ``hostnames`` as alive (they registered)."""
        deadline = time.monotonic() + timeout
        alive: set[str] = set()
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.name in hostnames and not process.running():
                    raise RuntimeError(f"conductor {process.name} exited")
            listed = http("GET", f"{api_url}/v1/conductors")["conductors"]
            alive = {c["hostname"] for c in listed if c["alive"]}
            if set(hostnames) <= alive:
                return
            time.sleep(0.2)
        raise RuntimeError(f"conductors alive after {timeout:.0f}s: {sorted(alive)}")

    def stop_all(self, timeout: float = 5.0) -> None:
        """SIGTERM everything still running at once, then SIGKILL whatever has not exited."""
        running = [p for p in self.processes if p.running()]
        for process in running:
            assert process.proc is not None
            process.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in running:
            assert process.proc is not None
            try:
                process.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"{process.name} ignored SIGTERM for {timeout:.0f}s; killing it")
                process.kill()

    def logs(self) -> str:
        parts = []
        for process in self.processes:
            parts.append(f"----- {process.name} (pid {process.proc and process.proc.pid}) -----")
            parts.append(process.log_text())
        return "\n".join(parts)

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop_all()
        finally:
            if exc_type is not None:
                # pytest shows captured output of failed tests only: exactly when it is needed.
                print(self.logs())
