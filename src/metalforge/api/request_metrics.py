"""Every API request counted and timed, by method, route template and status.

The route is the template the request matched (``/v1/nodes/{node_ident}``),
never the raw path, so a scan of made-up URLs cannot create new series;
a request no route took (refused before routing, or unknown) is counted
under ``<unrouted>``. Event streams are left out: they last as long as the
client listens, which is not a latency.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metalforge.tallies import HTTP_DURATION, Tally

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNROUTED = "<unrouted>"
STREAMING_ROUTES = frozenset({"/v1/events", "/events"})


def route_template(scope: Scope) -> str:
    """The template of the route that took the request, as the client addressed it.

    Routes are served with and without ``/v1``; the route object may hold
    the template without the prefix it was reached under, so the prefix is
    taken from the request's path.
    """
    template = getattr(scope.get("route"), "path", None)
    if not isinstance(template, str):
        return UNROUTED
    if scope["path"].startswith("/v1/") and not template.startswith("/v1"):
        return f"/v1{template}"
    return template


class RequestMetricsMiddleware:
    """Pure ASGI: times each HTTP request from its arrival to its last byte."""

    def __init__(self, app: ASGIApp, tally: Tally) -> None:
        self.app = app
        self.tally = tally

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            route = route_template(scope)
            if route not in STREAMING_ROUTES:
                method = scope["method"] if scope["method"] in METHODS else "other"
                self.tally.observe(
                    HTTP_DURATION, (method, route, str(status)), time.perf_counter() - started
                )
