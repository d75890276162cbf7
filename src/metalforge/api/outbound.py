"""Requests answered by calling a BMC run on threads of their own, a few per caller.

The API answers from a pool of request threads (and checks credentials in
it). A route that calls a BMC synchronously, as Ironic's boot-device,
indicator and virtual-media reads do, would hold one of those threads for
as long as the BMC takes: a tenant that enrolls nodes whose BMCs never
answer could take every thread and stall the API for everybody.

``calls_bmc`` moves such a route's body onto ``OutboundCalls``: a bounded
pool (``api.outbound_workers``) that nothing else uses, awaited from the
event loop, so no request thread waits. Each caller (its project, or the
user for the deployment's own users) may have ``api.outbound_per_caller``
such requests in flight; one more is refused at once with 503 and
``Retry-After``, as Ironic answers when no conductor worker is free, and so
is one beyond ``api.outbound_queue`` waiting for a thread. A call the
client gave up on still counts against its caller until its BMC call ends,
which the BMC guard's whole-call deadline bounds. Each BMC's own limit and
breaker (``drivers.bmc_guard``) apply inside.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from fastapi import Request

from metalforge.api.auth.access import share_of
from metalforge.config import ApiSettings
from metalforge.errors import RequestError

P = ParamSpec("P")
R = TypeVar("R")

RETRY_AFTER = "5"
"""Seconds a refused caller is told to wait before asking again."""


class OutboundCalls:
    """The pool and the per-caller counts of one API process."""

    def __init__(self, settings: ApiSettings) -> None:
        self.workers = settings.outbound_workers
        self.per_caller = settings.outbound_per_caller
        self.room = settings.outbound_workers + settings.outbound_queue
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="outbound")
        self._lock = threading.Lock()
        self._in_flight: Counter[str] = Counter()

    def in_flight(self, caller: str | None = None) -> int:
        """Requests admitted and not finished: ``caller``'s, or everybody's."""
        with self._lock:
            if caller is None:
                return sum(self._in_flight.values())
            return self._in_flight[caller]

    def _admit(self, caller: str) -> None:
        with self._lock:
            if self._in_flight[caller] >= self.per_caller:
                raise _busy(
                    f"{self.per_caller} requests that call a BMC are already in flight for "
                    f"{caller} (api.outbound_per_caller); retry when one has ended"
                )
            if sum(self._in_flight.values()) >= self.room:
                raise _busy(
                    "Too many requests that call a BMC are in flight (api.outbound_workers "
                    "and api.outbound_queue); retry later"
                )
            self._in_flight[caller] += 1

    def _release(self, caller: str) -> None:
        with self._lock:
            self._in_flight[caller] -= 1
            if self._in_flight[caller] <= 0:
                del self._in_flight[caller]

    async def run(self, caller: str, func: Callable[[], R]) -> R:
        """``func()`` on the pool, for ``caller``; 503 when its share is taken."""
        self._admit(caller)
        try:
            future: Future[R] = self._pool.submit(func)
        except BaseException:  # re-raised: whatever stopped the submission, the share goes back
            self._release(caller)
            raise
        future.add_done_callback(lambda _: self._release(caller))
        return await asyncio.wrap_future(future)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _busy(message: str) -> RequestError:
    return RequestError(503, message, headers={"Retry-After": RETRY_AFTER})


def outbound_of(request: Request) -> OutboundCalls:
    calls: OutboundCalls = request.app.state.outbound
    return calls


def calls_bmc(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run the route body ``func`` on the outbound pool (see the module docstring)."""

    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        request: Any = kwargs["request"]
        call = functools.partial(func, *args, **kwargs)
        return await outbound_of(request).run(share_of(request), call)

    return wrapper
