"""Run an installed console script in a process of its own, without paying its imports each time.

The OpenStack command lines (``baremetal``, ``openstack``, ``metalsmith``)
spend about 1.3 s of CPU importing their libraries before they do anything,
and the client tests run a few hundred of them. Here a fork server (this
module run as a program) imports those libraries once per test process;
every command is then a child forked from it: a process of its own, with
exactly the environment, arguments and standard streams the test gives it,
running the installed script's own entry point. Nothing of one command can
leak into the next, and nothing of the test process leaks into any of them.

``run_script(..., fork=False)`` runs the installed script file instead, for
the test that proves the script itself starts.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

PRELOAD = (
    "ironicclient.shell",
    "ironicclient.osc.plugin",
    "ironicclient.osc.v1.baremetal_node",
    "ironicclient.osc.v1.baremetal_port",
    "ironic_inspector_client.shell",
    "openstackclient.shell",
    "openstack.baremetal.v1._proxy",
    "metalsmith._cmd",
)
"""Modules the fork server imports once; what is missing here each child imports itself."""


@dataclass(frozen=True)
class Finished:
    """What one command left behind."""

    returncode: int
    stdout: str
    stderr: str


class ScriptTimeout(AssertionError):
    """The command was still running at its deadline (it has been killed)."""


# --- the fork server (this module as a program) ---


def _entry_point(script: str) -> Callable[[list[str]], object]:
    """The ``main`` the installed console script calls."""
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name=script)
    main: Callable[[list[str]], object] = entry.load()
    return main


def _exit_code(value: object) -> int:
    """What the interpreter would exit with for ``sys.exit(value)``."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _become(request: dict[str, Any]) -> None:
    """In the forked child: be the command, as its script would be, then exit with its code."""
    code = 1
    try:
        os.setpgid(0, 0)
        os.environ.clear()
        os.environ.update(request["env"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.argv = [request["script"], *request["argv"]]
        try:
            code = _exit_code(_entry_point(request["script"])(list(request["argv"])))
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:  # noqa: BLE001 - any uncaught error ends a real script so
            traceback.print_exc()
            code = 1
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _serve(script: str, requests: IO[str], answers: IO[str]) -> None:
    """Fork one child of ``script`` per request line; answer its pid, then how it ended.

    The script's path is ``argv[0]`` before anything is imported: some
    libraries take the program's name from it at import time.
    """
    sys.argv = [script]
    for module in PRELOAD:
        with contextlib.suppress(ImportError):  # not installed here: children import it
            __import__(module)
    _entry_point(Path(script).name)
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _become(request)
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()


# --- the test's side ---


class _ForkServer:
    """One script's fork server, started on first use; it runs one command at a time."""

    def __init__(self, script: Path) -> None:
        self.script = script
        self.lock = threading.Lock()
        self.process: subprocess.Popen[str] | None = None

    def _started(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            root = Path(__file__).resolve().parents[2]
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.console_scripts", str(self.script)],
                cwd=root,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            atexit.register(self.stop)
        return self.process

    def stop(self) -> None:
        if self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()
            self.process.wait(timeout=30)
            self.process = None

    def run(self, request: dict[str, Any], timeout: float) -> int | None:
        """The command's exit code, or None when it was killed at ``timeout``."""
        with self.lock:
            server = self._started()
            assert server.stdin is not None
            assert server.stdout is not None
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            pid = json.loads(server.stdout.readline())["pid"]
            ready, _, _ = select.select([server.stdout], [], [], timeout)
            if not ready:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            returncode: int = json.loads(server.stdout.readline())["returncode"]
            return returncode if ready else None


_SERVERS: dict[Path, _ForkServer] = {}
"""A fork server per script, for this test process."""


def run_script(
    script: Path,
    argv: Sequence[str],
    env: Mapping[str, str],
    timeout: float,
    *,
    fork: bool = True,
) -> Finished:
    """Run the console script at ``script`` with ``argv`` and exactly ``env``.

    Raises ``ScriptTimeout`` when the command outlives ``timeout`` seconds.
    """
    command = f"{script.name} {' '.join(argv)}"
    if not fork:
        try:
            done = subprocess.run(
                [str(script), *argv],
                env=dict(env),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise ScriptTimeout(f"`{command}` ran past {timeout} s") from exc
        return Finished(done.returncode, done.stdout, done.stderr)
    with tempfile.TemporaryDirectory(prefix="script-") as scratch:
        out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
        out.touch()
        err.touch()
        request = {
            "script": script.name,
            "argv": list(argv),
            "env": dict(env),
            "stdout": str(out),
            "stderr": str(err),
        }
        server = _SERVERS.setdefault(script, _ForkServer(script))
        returncode = server.run(request, timeout)
        if returncode is None:
            raise ScriptTimeout(f"`{command}` ran past {timeout} s")
        return Finished(
            returncode,
            out.read_text(encoding="utf-8", errors="replace"),
            err.read_text(encoding="utf-8", errors="replace"),
        )


if __name__ == "__main__":
    _serve(sys.argv[1], sys.stdin, sys.stdout)
