"""Waiting briefly for a node's reservation instead of answering 409 at once.

A conductor holds a node's reservation for the few milliseconds between a
flow's last transition and the release of the lock. A client that reacts to
the new state at once (``--wait`` loops do) would otherwise get a 409 and
fall into its 2-second retry loop. Routes decorated with ``wait_for_lock``
are re-run, for up to ``api.lock_wait_seconds``, while the node is locked; a
rolled-back attempt changes nothing, so re-running is safe.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from fastapi import Request

from metalforge.errors import NodeLocked

P = ParamSpec("P")
R = TypeVar("R")


def wait_for_lock(func: Callable[P, R]) -> Callable[P, R]:
    """Re-run ``func`` while it fails with ``NodeLocked``, within the configured wait."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        request: Any = kwargs.get("request")
        budget = _budget(request)
        deadline = time.monotonic() + budget
        delay = 0.01
        while True:
            try:
                return func(*args, **kwargs)
            except NodeLocked:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    return wrapper


def _budget(request: Request | None) -> float:
    if request is None:
        return 0.0
    wait: float = request.app.state.services.settings.api.lock_wait_seconds
    return wait
