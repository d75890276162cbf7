"""Loopback ports for the servers the lab, the tests and the tools start, safe in parallel.

With pytest-xdist each worker hands out ports from a range of its own, below
the kernel's ephemeral range (where ``bind(0)`` and outgoing connections take
theirs): between a port being found free and a server binding it, no other
worker and no client connection can take it. Run serially, the kernel picks.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading

_FIRST = 12000
_PER_WORKER = 2500
"""Eight workers fit below 32768, where Linux's ephemeral range starts by default."""


def _worker_number() -> int | None:
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


_NUMBER = _worker_number()
_START = _FIRST + (_NUMBER or 0) * _PER_WORKER
_END = _START + _PER_WORKER
_LOCK = threading.Lock()
_NEXT = itertools.cycle(range(_START, _END)) if _NUMBER is not None else None


def _bindable(kind: socket.SocketKind, port: int) -> bool:
    with socket.socket(socket.AF_INET, kind) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _next_range(kind: socket.SocketKind, count: int) -> int:
    assert _NEXT is not None
    with _LOCK:
        for _ in range(_PER_WORKER):
            first = next(_NEXT)
            if first + count > _END:
                continue
            if all(_bindable(kind, port) for port in range(first, first + count)):
                for _ in range(count - 1):
                    next(_NEXT)
                return first
    raise RuntimeError(f"no {count} free port(s) left in this worker's range")


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now."""
    if _NEXT is not None:
        return _next_range(socket.SOCK_STREAM, 1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_udp_ports(count: int, attempts: int = 50) -> int:
    """The first of ``count`` consecutive UDP ports free on loopback right now."""
    if _NEXT is not None:
        return _next_range(socket.SOCK_DGRAM, count)
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            first = int(probe.getsockname()[1])
        if first + count <= 65535 and all(
            _bindable(socket.SOCK_DGRAM, port) for port in range(first, first + count)
        ):
            return first
    raise RuntimeError(f"no {count} consecutive free UDP ports found")
