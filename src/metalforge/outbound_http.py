"""Outbound HTTP to peers a tenant names: whole-call deadlines, and which addresses it may reach.

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

``reaching(policy)`` restricts, for the block, the addresses this thread's
connections may reach: each connection is checked once it is connected,
against the address it actually reached, so a name that resolves to
another address by the time the connection is made (DNS rebinding) and
every redirect are checked too. A refused connection is closed before a
byte is sent; ``refusal()`` says why.
"""

from __future__ import annotations

import contextlib
import heapq
import ipaddress
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

LOG = logging.getLogger(__name__)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

NEVER_BY_DEFAULT: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network": 0.0.0.0 reaches the host itself
        "127.0.0.0/8",  # loopback: the host's own services
        "169.254.0.0/16",  # link-local, and clouds' metadata services (169.254.169.254)
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and broadcast
        "::/128",
        "::1/128",
        "fe80::/10",  # link-local
        "fd00:ec2::254/128",  # a cloud's metadata service on IPv6
        "ff00::/8",  # multicast
    )
)
"""Where a URL a tenant supplies may never lead unless an operator allows it: the host
itself, link-local networks and metadata services, multicast and reserved space."""


@dataclass(eq=False)
class Deadline:
    """One ``within`` block: when it ends, and the connections opened under it."""

    at: float
    """``time.monotonic()`` value past which the block's connections are cut."""
    seconds: float
    setting: str
    """The setting the deadline comes from, for messages."""
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
def within(seconds: float, setting: str) -> Iterator[Deadline]:
    """Cut every connection this thread opens in the block ``seconds`` from now
    (``setting``: where the figure comes from, as messages name it)."""
    outer = current()
    at = time.monotonic() + seconds
    if outer is not None and outer.at <= at:
        yield outer  # the enclosing block ends first: its deadline rules
        return
    deadline = Deadline(at, seconds, setting)
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


class PeerPolicy:
    """Which addresses connections may reach: none of ``refused`` unless in ``allowed``."""

    def __init__(self, refused: Iterable[IPNetwork], allowed: Iterable[IPNetwork] = ()) -> None:
        self.refused = tuple(refused)
        self.allowed = tuple(allowed)

    def refuses(self, address: str) -> str | None:
        """Why ``address`` may not be reached (None: it may)."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return f"{address} is not an IP address"
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip in network for network in self.allowed):
            return None
        for network in self.refused:
            if ip in network:
                return f"{ip} is in {network}, which outbound fetches may not reach"
        return None


@dataclass
class _Reach:
    policy: PeerPolicy
    refused: str | None = None


def _reach() -> _Reach | None:
    found: _Reach | None = getattr(_CURRENT, "reach", None)
    return found


@contextlib.contextmanager
def reaching(policy: PeerPolicy) -> Iterator[None]:
    """Refuse, in the block, connections to what ``policy`` refuses (see the module)."""
    outer = _reach()
    _CURRENT.reach = _Reach(policy)
    try:
        yield
    finally:
        _CURRENT.reach = outer


def refusal() -> str | None:
    """Why the block's last refused connection was refused (None: none was)."""
    reach = _reach()
    return reach.refused if reach is not None else None


class PeerRefused(OSError):
    """A connection reached an address the thread's ``PeerPolicy`` refuses."""


def _watch_new(sock: socket.socket) -> None:
    reach = _reach()
    if reach is not None:
        try:
            peer = str(sock.getpeername()[0])
        except OSError:
            peer = "an unknown address"
        why = reach.policy.refuses(peer)
        if why is not None:
            reach.refused = why
            sock.close()
            raise PeerRefused(why)
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
