"""Requests refused before any route sees them: oversized bodies, NUL characters.

A body is read whole by the routes (JSON), so its size is capped up front
(413), from ``Content-Length`` when given and by counting otherwise. A NUL
character in the path or the query string can never name anything, and
PostgreSQL refuses it in a query parameter (which would be a 500), so it is
a 400 here for every route at once.
"""

from __future__ import annotations

import asyncio
from urllib.parse import unquote_to_bytes

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metalforge.api.errors import error_body, send_json_error
from metalforge.services.documents import BODY_LIMITS, BodyLimits


class BodyTooSlow(HTTPException):
    """A part of the body did not arrive within ``api.body_timeout`` (408)."""

    def __init__(self, timeout: float) -> None:
        super().__init__(408, f"The request body did not arrive within {timeout:g} seconds.")


class BodyTooLarge(HTTPException):
    """Raised while a route reads a body without ``Content-Length`` past the limit.

    An ``HTTPException`` because FastAPI re-raises those from body parsing
    (anything else becomes "error parsing the body"); the app's handler
    turns it into the Ironic error format.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(413, too_large_message(limit))


def too_large_message(limit: int) -> str:
    return f"Request body is larger than the limit of {limit} bytes."


_AGENT_PATHS = ("/v1/heartbeat", "/heartbeat", "/v1/lookup", "/lookup")
_PROVISION_SUFFIX = "/states/provision"
"""A provision request may carry an inline config drive: it has a limit of its own."""


class RequestGuardMiddleware:
    """Pure ASGI middleware; sits inside the version middleware so errors carry its headers.

    The agents' calls (which need no credentials) get a limit of their own,
    far below the operator's: a heartbeat is a few hundred bytes, and
    anything that can reach the provisioning network may send one. An
    inspection report carries the ramdisk's logs and has a limit of its own.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_body_size: int,
        max_agent_body_size: int,
        max_report_size: int,
        report_paths: frozenset[str] = frozenset({"/v1/continue_inspection"}),
        body_timeout: float = 30.0,
        max_provision_body_size: int | None = None,
        max_json_depth: int = 25,
    ) -> None:
        self.app = app
        self.body_timeout = body_timeout
        self.operator_limit = max_body_size
        self.provision_limit = max_provision_body_size or max_body_size
        self.limits = BodyLimits(max_depth=max_json_depth, max_document=max_body_size)
        self.agent_limit = max_agent_body_size
        self.report_limit = max_report_size
        self.report_paths = report_paths

    def _limit_for(self, path: str) -> int:
        """The body limit of ``path``: the agents', a report's, a provision request's, or
        the operator's."""
        if path.startswith(_AGENT_PATHS):
            return self.agent_limit
        if path in self.report_paths:
            return self.report_limit
        if path.endswith(_PROVISION_SUFFIX):
            return self.provision_limit
        return self.operator_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope["path"] or b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
            await _reject(send, 400, "NUL characters are not allowed in the URL.")
            return
        limit = self._limit_for(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _reject(send, 413, too_large_message(limit))
            return
        received = 0
        body_done = False

        async def counting_receive() -> Message:
            # Only the body is timed: once it is in, a receive waits for the client to
            # go away (an event stream listens so for minutes), which is no fault.
            nonlocal received, body_done
            if body_done:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.body_timeout)
            except TimeoutError:
                raise BodyTooSlow(self.body_timeout) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        token = BODY_LIMITS.set(self.limits)
        try:
            await self.app(scope, counting_receive, send)
        finally:
            BODY_LIMITS.reset(token)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _reject(send: Send, status: int, message: str) -> None:
    await send_json_error(send, status, error_body(status, message))
