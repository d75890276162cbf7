"""Waiting briefly for a node's reservation instead of answering 409 at once.

A conductor holds a node's reservation for the few milliseconds between a
flow's last transition and the release of the lock. A client that reacts to
the new state at once (``--wait`` loops do) would otherwise get a 409 and
fall into its 2-second retry loop. Routes decorated with ``wait_for_lock``
are re-run, for up to ``api.lock_wait_seconds``, while the node is locked; a
rolled-back attempt changes nothing, so re-running is safe.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from metalforge.errors import NodeLocked

P = ParamSpec("P")
R = TypeVar("R")


def wait_for_lock(func: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Re-run ``func`` while it fails with ``NodeLocked``, within the configured wait.

    Each attempt runs in a worker thread (it does blocking database work); the
    waits between attempts are on the event loop, so requests queued behind a
    locked node hold no worker thread while they wait and cannot starve
    unrelated requests of them.
    """

    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return await _retried(
            kwargs.get("request"), lambda: run_in_threadpool(func, *args, **kwargs)
        )

    return wrapper


def await_lock(func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """``wait_for_lock`` for a route body that runs where it likes (``outbound.calls_bmc``)."""

    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return await _retried(kwargs.get("request"), lambda: func(*args, **kwargs))

    return wrapper


async def _retried(request: Any, attempt: Callable[[], Awaitable[R]]) -> R:
    deadline = time.monotonic() + _budget(request)
    delay = 0.01
    while True:
        try:
            return await attempt()
        except NodeLocked:
            if time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)


def _budget(request: Request | None) -> float:
    if request is None:
        return 0.0
    wait: float = request.app.state.services.settings.api.lock_wait_seconds
    return wait
