"""``GET /v1/events``: the nodes' changes as a server-sent event stream.

A metalforge addition for dashboards and tools that would otherwise poll:
each ``node`` event carries the node's state and its flow's progress (with
the estimate of time left) as they are after the change; ``node_deleted``
names a node that is gone; ``resync`` tells the client it missed events and
should re-read what it shows. ``?node=`` limits the stream to one node.
Event ids let a client that reconnects (``Last-Event-ID``) get what it
missed, within ``conductor.event_retention``.

A caller sees the events of the nodes it may read (``baremetal:node:get``
for each node), with ``last_error`` hidden where its rules hide it, exactly
as ``GET /v1/nodes`` shows them. The stream ends when the server stops, so
the client reconnects to another API process.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from metalforge.api.auth.access import LIST, allows, guard, node_disclosure, share_of
from metalforge.api.auth.policy import node_target
from metalforge.api.node_view import REDACTED
from metalforge.api.versions import request_version
from metalforge.api.wiring import read_only, services
from metalforge.errors import RequestError
from metalforge.services import lookup
from metalforge.services.events import (
    NODE,
    NODE_DELETED,
    READY,
    RESYNC,
    EventHub,
    NodeEvent,
)

LOG = logging.getLogger(__name__)

router = APIRouter(tags=["events"])

KEEP_ALIVE = 15.0
"""Seconds of silence after which a comment is sent (proxies drop idle connections)."""
RETRY_MS = 2000
"""How long a browser's EventSource waits before reconnecting."""


@router.get(
    "/events",
    summary="Stream the nodes' changes (server-sent events)",
    dependencies=[guard("baremetal:node:list_all", LIST)],
    response_class=StreamingResponse,
)
async def stream_events(
    request: Request,
    node: str | None = Query(default=None, description="Only this node (UUID or name)"),
    last_event_id: str | None = Header(default=None),
) -> StreamingResponse:
    svc = services(request)
    only = None if node is None else await read_only(svc, _visible_node, request, node)
    after = _event_id(last_event_id)
    if svc.events.subscribers >= svc.settings.api.max_event_streams:
        raise RequestError(
            503, "Too many event streams on this API process", headers={"Retry-After": "5"}
        )
    caller = share_of(request)
    if svc.events.streams_of(caller) >= svc.settings.api.max_event_streams_per_caller:
        raise RequestError(
            503,
            f"{caller} already has {svc.settings.api.max_event_streams_per_caller} event "
            "streams open on this API process (api.max_event_streams_per_caller)",
            headers={"Retry-After": "5"},
        )
    stopping: Callable[[], bool] = getattr(request.app.state, "stopping", lambda: False)
    lifetime = svc.settings.api.event_stream_lifetime
    return StreamingResponse(
        _frames(svc.events, after, Audience(request, only, caller), _ends(stopping, lifetime)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _ends(stopping: Callable[[], bool], lifetime: float) -> Callable[[], bool]:
    """When a stream ends: the server stops, or the stream has lived ``lifetime`` seconds
    (the client reconnects, and its credentials are checked again)."""
    deadline = time.monotonic() + lifetime
    return lambda: stopping() or time.monotonic() >= deadline


def _visible_node(request: Request, ident: str) -> str:
    """The UUID of the node ``?node=`` names, if the caller may read it (404 otherwise)."""
    with services(request).db.snapshot(single_statement=True) as connection:
        row = lookup.find_node_row(
            connection, ident, request_version(request), ("uuid", "owner", "lessee")
        )
    if not allows(request, "baremetal:node:get", node_target(row.owner, row.lessee)):
        raise lookup.node_not_found(ident)
    return str(row.uuid)


def _event_id(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise RequestError(400, f"Last-Event-ID must be an event id, not {raw[:40]!r}")
    return int(raw)


class Audience:
    """What one caller may see of the stream: the nodes its rules let it read (cached
    per owner and lessee, as node lists are), with their fields hidden as it must."""

    def __init__(self, request: Request, only: str | None, caller: str = "") -> None:
        self._request = request
        self._only = only
        self.caller = caller
        self._known: dict[tuple[str | None, str | None], bool] = {}
        self._disclose = node_disclosure(request)

    def sees(self, event: NodeEvent) -> bool:
        if event.kind in (RESYNC, READY):
            return True
        if self._only is not None and event.node_uuid != self._only:
            return False
        if event.kind == NODE_DELETED:
            if self._only is not None:
                return True  # the node it was allowed to follow is gone
            # The log does not say whose the node was: only a caller who may read
            # every node learns of deletions from the unfiltered stream.
            return allows(self._request, "baremetal:node:list_all")
        key = (event.owner, event.lessee)
        if key not in self._known:
            self._known[key] = allows(self._request, "baremetal:node:get", node_target(*key))
        return self._known[key]

    def shown(self, event: NodeEvent) -> dict[str, Any]:
        if event.kind != NODE:
            return event.data
        if "last_error" in self._disclose(event.owner, event.lessee).hidden:
            return {**event.data, "last_error": REDACTED["last_error"]}
        return event.data


def _frame(event: NodeEvent, data: dict[str, Any]) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (
        event.id,
        event.kind.encode(),
        orjson.dumps(data),
    )


async def _frames(
    hub: EventHub, after: int | None, audience: Audience, ended: Callable[[], bool]
) -> AsyncIterator[bytes]:
    """The stream. The subscription is taken here, not in the route, so that it is given
    back whatever happens: a response cancelled before it started never runs a route's
    clean-up, but a generator that never started holds nothing."""
    yield b"retry: %d\n\n" % RETRY_MS
    try:
        subscription, since = await run_in_threadpool(
            hub.subscribe, asyncio.get_running_loop(), audience.caller
        )
    except SQLAlchemyError:
        LOG.warning("cannot follow the node event log; the client will retry", exc_info=True)
        return
    try:
        backlog = [] if after is None else await run_in_threadpool(hub.backlog, after)
        for event in backlog:
            if audience.sees(event):
                yield _frame(event, audience.shown(event))
        # From here the stream misses nothing after ``since``: a client may read the
        # state it shows now and keep it current with what follows.
        yield _frame(NodeEvent(since, READY, "", None, None, {}), {})
        quiet = 0.0
        while not ended():
            try:
                event = await asyncio.wait_for(subscription.queue.get(), timeout=1.0)
            except TimeoutError:
                quiet += 1.0
                if quiet >= KEEP_ALIVE:
                    quiet = 0.0
                    yield b": keep-alive\n\n"
                continue
            subscription.taken()
            if subscription.overflowed:
                subscription.overflowed = False
                quiet = 0.0
                yield _frame(NodeEvent(event.id, RESYNC, "", None, None, {}), {})
            if audience.sees(event):
                quiet = 0.0
                yield _frame(event, audience.shown(event))
    finally:
        hub.unsubscribe(subscription)
