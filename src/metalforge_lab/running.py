"""``with`` for the lab's peers: started on entry, stopped on exit, even after an error;
and the stop of a helper server's process."""

from __future__ import annotations

import subprocess
from types import TracebackType
from typing import Self


class StartStop:
    """A peer with ``start`` and ``stop``; as a context manager, ``stop`` always runs."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def terminate(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM a helper server (redis-server, haproxy), SIGKILL it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
