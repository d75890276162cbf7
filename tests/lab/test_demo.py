"""``metalforge-lab demo`` as a newcomer meets it: started, followed, stopped.

The demo runs as a subprocess, as ``make run VIRTUAL_NODES=N`` runs it. The
commands it prints are run exactly as printed, with the real ``baremetal``
CLI, so the walk-through a newcomer copies cannot rot: provide (the agent
cleans), the image's instance_info, deploy (the sample image lands on the
node's disk), undeploy, erasure records and history. Then Ctrl-C, sent to
the demo's process group as a terminal would, must leave no namespace,
bridge, loop device or process behind; so must a SIGTERM in the middle of
starting, and what a SIGKILLed demo left the next start removes. Refusals
(port taken, no agent virtualenv, not root) must be immediate and say what to
do.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from metalforge_lab import demo, namespaces
from metalforge_lab.ports import free_port
from tests.clients.conftest import BAREMETAL, BaremetalCli
from tests.support.lab import require_lab

pytestmark = pytest.mark.slow

READY_TIMEOUT = 120.0
"""Seconds from start to the ready line: imports, lab, metalforge, enrollment (~10 s idle)."""
STOP_TIMEOUT = 40.0


@pytest.fixture(scope="module", autouse=True)
def _requirements() -> None:
    require_lab()
    if not BAREMETAL.exists():
        pytest.fail("python-ironicclient's `baremetal` is part of the test dependencies")


def demo_argv(state_dir: Path, api_port: int, *extra: str) -> list[str]:
    """One node: enough to see the flow, and the lightest lab (``extra``: more options)."""
    command = [sys.executable, "-m", "metalforge_lab.cli", "demo", "--nodes", "1"]
    return [
        *command,
        "--state-dir",
        str(state_dir),
        "--api-port",
        str(api_port),
        "--inspector-port",
        str(free_port()),
        *extra,
    ]


class DemoProcess:
    """``metalforge-lab demo`` in a session of its own, its output collected line by line."""

    def __init__(
        self,
        state_dir: Path,
        api_port: int,
        env: dict[str, str] | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        self.state_dir = state_dir
        self.api_port = api_port
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        if env is None:
            # The demo's own servers take ports from the kernel, not from this worker's
            # range (metalforge_lab.ports), where the test chose the demo's API port.
            env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
        self.proc = subprocess.Popen(
            demo_argv(state_dir, api_port, *extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, wanted: str, timeout: float) -> str:
        """Until a line starting with ``wanted``; returns everything printed so far."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {wanted!r} within {timeout} s; printed so far:\n{self.output}"
                ) from None
            if line is None:
                self.proc.wait(10)
                raise AssertionError(
                    f"the demo exited ({self.proc.returncode}) before {wanted!r}:\n{self.output}"
                )
            self.lines.append(line)
            if line.startswith(wanted):
                return self.output

    def stop(self, signum: int, group: bool) -> int:
        """Send ``signum`` (to the whole group, as a terminal's Ctrl-C does); the exit code."""
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)
        try:
            code = self.proc.wait(STOP_TIMEOUT)
        finally:
            self._reader.join(5)
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return code

    def kill(self) -> None:
        """Last resort after a failed test: what is left, ``metalforge-lab down`` removes."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if (self.state_dir / "lab.json").exists() or (self.state_dir / "vms.json").exists():
            down = [sys.executable, "-m", "metalforge_lab.cli", "down"]
            subprocess.run(
                [*down, "--state-dir", str(self.state_dir)],
                capture_output=True,
                check=False,
                timeout=60,
            )


@contextlib.contextmanager
def running_demo(
    state_dir: Path, api_port: int, clean_up: bool = True, extra: Sequence[str] = ()
) -> Iterator[DemoProcess]:
    process = DemoProcess(state_dir, api_port, extra=extra)
    try:
        yield process
    except BaseException:
        process.kill()
        raise
    finally:
        if clean_up:
            process.kill()


def printed_commands(output: str) -> list[list[str]]:
    """The ``baremetal`` commands of the "Try it" part, continuation lines joined."""
    tried = output.split("Try it", 1)[1]
    commands: list[list[str]] = []
    pending = ""
    for line in tried.splitlines():
        text = line.strip()
        if not pending and not text.startswith("baremetal "):
            continue
        pending = f"{pending} {text}" if pending else text
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        commands.append(shlex.split(pending, comments=True))
        pending = ""
    return commands


def assert_nothing_left(state_dir: Path, api_port: int) -> None:
    """No namespace, veth, bridge, loop device, process or listening port of the demo."""
    state = json.loads((state_dir / "lab.json").read_text())
    assert state["running"] is False
    assert not namespaces.exists(state["bridge"])
    for node in state["nodes"]:
        assert node["namespace"] not in namespaces.namespaces()
        assert not namespaces.exists(node["host_veth"])
    loops = subprocess.run(
        ["losetup", "-l", "-n", "-O", "BACK-FILE"], capture_output=True, text=True, check=True
    )
    assert str(state_dir) not in loops.stdout
    leftovers = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if str(state_dir).encode() in cmdline.read_bytes():
                leftovers.append(cmdline.read_bytes().replace(b"\0", b" ").decode())
    assert leftovers == [], leftovers
    assert not (state_dir / demo.METALFORGE_PID).exists()
    assert not demo.port_in_use("127.0.0.1", api_port)


def test_a_newcomer_follows_the_printed_steps_and_ctrl_c_leaves_nothing(tmp_path: Path) -> None:  # noqa: PLR0915 - follows the demo's printed steps in order
    state_dir = tmp_path / "state"
    port = free_port()
    started = time.monotonic()
    with running_demo(state_dir, port) as process:
        output = process.wait_for(demo.READY_LINE, READY_TIMEOUT)
        ready_after = time.monotonic() - started
        url = f"http://127.0.0.1:{port}"
        assert f"export OS_AUTH_TYPE=none OS_ENDPOINT={url}" in output
        cli = BaremetalCli(url)
        nodes = cli.json("node", "list")
        assert [n["provision_state"] for n in nodes] == ["manageable"], nodes
        name = nodes[0]["name"]
        assert name.startswith("mfdemo"), name
        assert name.endswith("-node-0"), name

        commands = printed_commands(output)
        verbs = [command[1:3] for command in commands]
        assert verbs == [
            ["node", "list"],
            ["node", "inspect"],
            ["node", "provide"],
            ["node", "show"],
            ["node", "set"],
            ["node", "deploy"],
            ["node", "undeploy"],
            ["node", "history"],
        ], commands
        results = {}
        flow_started = time.monotonic()
        for command in commands:
            assert command[0] == "baremetal"
            results[command[2]] = cli.run(*command[1:]).stdout
            if command[2] == "inspect":
                shown = cli.json("node", "show", name)
                assert shown["provision_state"] == "manageable", shown["last_error"]
                assert shown["properties"]["memory_mb"] == 2048, "the agent's report"
            if command[2] == "deploy":
                shown = cli.json("node", "show", name)
                assert shown["provision_state"] == "active", shown["last_error"]
                disk = state_dir / "disks" / f"{name}-disk0.img"
                table = subprocess.run(
                    ["sgdisk", "-p", str(disk)], capture_output=True, text=True, check=True
                )
                assert demo.IMAGE_PARTITION in table.stdout, "the sample image is not on the disk"
        flow_took = time.monotonic() - flow_started
        assert "erasure_records" in results["show"]
        assert '"result": "erased"' in results["show"] or "'result': 'erased'" in results["show"]
        assert "erased in" in results["history"]
        assert cli.json("node", "show", name)["provision_state"] == "available"

        stopping = time.monotonic()
        code = process.stop(signal.SIGINT, group=True)
        stop_took = time.monotonic() - stopping
    assert code == 0, process.output
    assert process.lines[-1].startswith("stopped"), process.output
    assert_nothing_left(state_dir, port)
    print(f"ready after {ready_after:.1f} s, flow {flow_took:.1f} s, stop {stop_took:.1f} s")


def test_sigterm_while_starting_tears_down_what_was_built(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    port = free_port()
    with running_demo(state_dir, port) as process:
        process.wait_for("starting ", READY_TIMEOUT)  # the lab
        process.wait_for("starting ", READY_TIMEOUT)  # the lab is up; metalforge is starting
        code = process.stop(signal.SIGTERM, group=False)
    assert code == 0, process.output
    assert demo.READY_LINE not in process.output, "the signal was meant to come while starting"
    assert "stopped" in process.lines[-1], process.output
    assert_nothing_left(state_dir, port)


def test_a_demo_killed_with_sigkill_is_cleaned_up_by_the_next_start(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    port = free_port()
    with running_demo(state_dir, port, clean_up=False) as killed:
        killed.wait_for(demo.READY_LINE, READY_TIMEOUT)
        # Only the demo: its metalforge (own session) and emulator stay, holding port and BMC.
        assert killed.stop(signal.SIGKILL, group=False) == -signal.SIGKILL
        assert demo.port_in_use("127.0.0.1", port)
    with running_demo(state_dir, port) as process:
        output = process.wait_for(demo.READY_LINE, READY_TIMEOUT)
        assert "removed leftover metalforge" in output
        assert "removed leftover emulator" in output
        assert process.stop(signal.SIGTERM, group=False) == 0, process.output
    assert_nothing_left(state_dir, port)


def _refusal(tmp_path: Path, port: int, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        demo_argv(tmp_path / "state", port),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done
    assert not (tmp_path / "state" / "lab.json").exists(), "nothing is built after a refusal"
    return done.stderr


def test_a_taken_port_is_refused_at_once(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        error = _refusal(tmp_path, port)
    assert f"127.0.0.1:{port} is already in use" in error
    assert "--api-port" in error


def test_a_missing_agent_virtualenv_is_refused_at_once(tmp_path: Path) -> None:
    env = {**os.environ, "METALFORGE_IPA_PYTHON": str(tmp_path / "nowhere" / "bin" / "python")}
    error = _refusal(tmp_path, free_port(), env)
    assert "no ironic-python-agent virtualenv" in error
    assert "make run VIRTUAL_NODES=N" in error


def test_non_root_is_refused_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(demo.DemoError, match="need root"):
        demo.preflight(demo.DemoOptions(nodes=1, state_dir=tmp_path))
