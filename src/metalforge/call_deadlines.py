"""Whole-call deadlines on outbound HTTP: a peer that trickles or never answers is cut off.

requests (and so sushy) has only per-read timeouts: a BMC or an image server
that sends one byte every few seconds, or accepts a connection and never
finishes its answer, keeps the calling thread for as long as it likes. A
thread that waits like that is a worker some other node, or some other
tenant, does not get.

``within(seconds)`` sets a deadline for everything the current thread does
over HTTP in the block; sessions built by ``session()`` (and any session
with ``DeadlineAdapter`` mounted) register each connection they open with
the thread's deadline. One watchdog thread shuts the connection down when
the deadline passes (``socket.shutdown`` on a duplicate of the descriptor,
so a TLS connection is cut as well as a plain one): the blocked read ends
at once with a connection error, whatever the peer does, and every retry
the client makes after that is cut as soon as it connects. ``expired()``
then tells the caller why its call failed, so the error it reports names
the deadline rather than a vague connection reset.

Nothing outside a ``within`` block is watched; a block inside another keeps
the earlier of the two deadlines.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

LOG = logging.getLogger(__name__)


@dataclass(eq=False)
class Deadline:
    """One ``within`` block: when it ends, and the connections opened under it."""

    at: float
    """``time.monotonic()`` value past which the block's connections are cut."""
    seconds: float
    expired: bool = False
    ended: bool = False
    sockets: list[socket.socket] = field(default_factory=list)
    """Duplicates of the connections' descriptors (closed when the block ends)."""


class _Watchdog:
    """The one thread that cuts connections whose deadline passed."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def start(self, deadline: Deadline) -> None:
        with self._lock:
            heapq.heappush(self._heap, (deadline.at, next(self._order), deadline))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="call-deadlines", daemon=True
                )
                self._thread.start()
            self._lock.notify()

    def watch(self, deadline: Deadline, sock: socket.socket) -> None:
        """Cut ``sock`` when ``deadline`` passes (at once if it has)."""
        try:
            duplicate = sock.dup()
        except OSError:
            return  # already closed: nothing left to cut
        with self._lock:
            if deadline.ended:
                duplicate.close()
                return
            deadline.sockets.append(duplicate)
            late = deadline.expired
        if late:
            _cut(duplicate)

    def end(self, deadline: Deadline) -> None:
        with self._lock:
            deadline.ended = True
            sockets, deadline.sockets = deadline.sockets, []
        for sock in sockets:
            sock.close()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._lock.wait(wait)
                _, _, deadline = heapq.heappop(self._heap)
                if deadline.ended:
                    continue
                deadline.expired = True
                sockets = list(deadline.sockets)
            for sock in sockets:
                _cut(sock)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()
_CURRENT = threading.local()


def current() -> Deadline | None:
    """The deadline of the innermost ``within`` block this thread is in."""
    found: Deadline | None = getattr(_CURRENT, "deadline", None)
    return found


@contextlib.contextmanager
def within(seconds: float) -> Iterator[Deadline]:
    """Cut every connection this thread opens in the block ``seconds`` from now."""
    outer = current()
    at = time.monotonic() + seconds
    if outer is not None and outer.at <= at:
        yield outer  # the enclosing block ends first: its deadline rules
        return
    deadline = Deadline(at, seconds)
    _WATCHDOG.start(deadline)
    _CURRENT.deadline = deadline
    try:
        yield deadline
    finally:
        _CURRENT.deadline = outer
        _WATCHDOG.end(deadline)


def expired() -> bool:
    """Whether this thread's current deadline has passed (its connections were cut)."""
    deadline = current()
    return deadline is not None and (deadline.expired or time.monotonic() >= deadline.at)


def _watch_new(sock: socket.socket) -> None:
    deadline = current()
    if deadline is not None:
        _WATCHDOG.watch(deadline, sock)


class _DeadlineConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _watch_new(sock)
        return sock


class _DeadlineHTTPSConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _watch_new(sock)
        return sock


class _DeadlinePool(HTTPConnectionPool):
    ConnectionCls = _DeadlineConnection


class _DeadlineHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _DeadlineHTTPSConnection


class DeadlineAdapter(HTTPAdapter):
    """requests' adapter whose connections are cut at the thread's ``within`` deadline.

    Connections are not kept between requests: one kept open by a call
    under one deadline must not carry a later call past its own.
    """

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _DeadlinePool,
            "https": _DeadlineHTTPSPool,
        }

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        request.headers.setdefault("Connection", "close")
        return super().send(request, *args, **kwargs)


def mount(session: requests.Session) -> requests.Session:
    """``session`` with ``DeadlineAdapter`` for http and https."""
    adapter = DeadlineAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def session() -> requests.Session:
    """A requests session whose connections obey ``within``."""
    return mount(requests.Session())
