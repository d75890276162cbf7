"""What the API needs, built once by the entry point and stored on the app (its wiring)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URL

from metalforge.api.auth.policy import Policy
from metalforge.services.context import Services
from metalforge.services.events import EventHub

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class ApiServices(Services):
    """The services, and the authorization rules the routes check before calling them."""

    policy: Policy = field(default_factory=Policy)
    """The authorization rules (defaults, or the operator's policy file)."""
    events: EventHub = field(init=False)
    """This process's reader of the node event log, for ``GET /v1/events``."""

    def __post_init__(self) -> None:
        self.events = EventHub(self.db)


def services(request: Request) -> ApiServices:
    svc: ApiServices = request.app.state.services
    return svc


def base_url(request: Request) -> str:
    """The externally visible base URL, for links and ``next``."""
    configured: str | None = request.app.state.services.settings.api.public_endpoint
    if configured:
        return configured.rstrip("/")
    scope = request.scope
    host = next((value for name, value in scope["headers"] if name == b"host"), None)
    root = scope.get("app_root_path", scope.get("root_path", ""))
    server = scope.get("server")
    return _base_url(scope.get("scheme", "http"), host, tuple(server) if server else None, root)


@functools.lru_cache(maxsize=256)
def _base_url(
    scheme: str, host: bytes | None, server: tuple[str, int | None] | None, root_path: str
) -> str:
    # What ``request.base_url`` says for these parts, worked out once: every
    # node in a view carries links, and Starlette builds the URL per request.
    scope: dict[str, Any] = {
        "type": "http",
        "scheme": scheme,
        "server": server,
        "root_path": root_path,
        "path": root_path if root_path.endswith("/") else f"{root_path}/",
        "query_string": b"",
        "headers": [(b"host", host)] if host is not None else [],
    }
    return str(URL(scope=scope)).rstrip("/")


async def read_only(
    svc: ApiServices, func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs
) -> R:
    """Run a read-only route body: on the event loop with SQLite, in a thread otherwise.

    A SQLite read in WAL mode never waits for a lock and takes about a tenth
    of a millisecond: less than handing it to a worker thread and back, which
    for a status poll (the request clients send most) was a third of its cost.
    A PostgreSQL read waits on the network and must not stall the event loop.
    """
    if svc.db.is_sqlite:
        return func(*args, **kwargs)
    return await run_in_threadpool(func, *args, **kwargs)
