"""SIGTERM ends a serving process through its clean-up, however the signal lands.

A Python signal handler runs wherever the main thread happens to be, which can be
inside a weakref or finaliser callback: an exception raised there is printed and
dropped. These run a real server in a child process (handlers belong to the main
thread) and deliver the exit exactly there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

from metalforge_lab.ports import free_port
from metalforge_lab.running import terminate

_SCRIPT = textwrap.dedent(
    """
    import signal, sys, weakref
    from metalforge import serving
    from metalforge.config import load_settings

    settings = load_settings(
        database={"url": "sqlite://"},
        api={"port": int(sys.argv[1])},
        inspector={"enabled": False},
    )

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"up"})

    signal.signal(signal.SIGTERM, serving._exit_quietly)
    if sys.argv[2] == "dropped":
        class Anything:
            pass
        thing = Anything()
        # The handler's exit raised inside a weakref callback, where it is dropped.
        ref = weakref.ref(thing, lambda _ref: serving._exit_quietly(signal.SIGTERM, None))
        del thing
    try:
        serving.serve(settings, app)
    finally:
        print("clean-up ran", flush=True)
    """
)


def _start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = free_port()
    log = tmp_path / f"{mode}.log"
    script = tmp_path / "serve.py"
    script.write_text(_SCRIPT)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(port), mode],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    return proc, port, log


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def test_a_sigterm_whose_exit_was_dropped_during_start_up_still_stops_the_server(
    tmp_path: Path,
) -> None:
    proc, _port, log = _start(tmp_path, "dropped")
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        terminate(proc)
        raise AssertionError(f"the server kept serving:\n{log.read_text()}") from None
    output = log.read_text()
    assert code == 0, output
    assert "Exception ignored" in output  # the exit really was dropped
    assert "clean-up ran" in output


def test_a_sigterm_while_serving_returns_to_the_clean_up_and_exits_0(tmp_path: Path) -> None:
    proc, port, log = _start(tmp_path, "serving")
    try:
        deadline = time.monotonic() + 60
        while not _answers(port):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        terminate(proc)
    output = log.read_text()
    assert code == 0, output
    assert "clean-up ran" in output
    # uvicorn raises SIGTERM again after its shutdown: nothing raises from it any more.
    assert "Exception ignored" not in output
    assert "Traceback" not in output
