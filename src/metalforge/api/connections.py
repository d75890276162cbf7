"""Bounds on every connection the API's sockets accept.

uvicorn closes a connection that idles between requests (keep-alive), but
one that never finishes its request head holds its socket and buffers for
ever: a few thousand such connections, from anything that can reach the
operator or provisioning network, would exhaust the process. So:

* ``header_timeout``: a client has that long, from its connection or from
  the first byte of its next request, to finish a request's head; the clock
  is not restarted by each byte (a client dribbling one byte a second gains
  nothing);
* ``body_timeout``: each part of a request's body must arrive within it, or
  the request ends with 408 (``api.guards`` applies it);
* ``max_connections``: uvicorn's concurrency limit, beyond which new
  requests are answered 503 at once.

The head timer is added to uvicorn's own protocol class (httptools), not a
front server: the same bounds then hold on every socket the process serves.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class HeadBoundedProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with a deadline of ``header_timeout`` on each request head.

    A module-level class, not one written inside ``bounded_protocol``, so each
    method stands alone; ``bounded_protocol`` only supplies the deadline.
    """

    header_timeout: ClassVar[float]
    """Seconds a client has to finish a request's head (see the module doc)."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._between_requests():
            self._arm()  # the next request's head begins: it has until the deadline
        super().data_received(data)
        if not self._between_requests():
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        cycle = self.cycle
        return cycle is None or cycle.response_complete

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_overdue)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self._between_requests() and not self.transport.is_closing():
            self.transport.close()


def bounded_protocol(header_timeout: float) -> type[HttpToolsProtocol]:
    """uvicorn's HTTP protocol with a deadline on each request head.

    uvicorn builds the protocol from a class, without arguments: the deadline
    travels as an attribute of a subclass made for it.
    """
    deadline = header_timeout

    class Bounded(HeadBoundedProtocol):
        header_timeout = deadline

    return Bounded
