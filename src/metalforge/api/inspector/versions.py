"""The inspector API's versions: its own header, its own range, errors in its own shape.

Clients send ``X-OpenStack-Ironic-Inspector-API-Version: X.Y`` (or
``latest``); none means the newest. A value that cannot be parsed is a 400,
one outside 1.0-1.18 a 406, and every response, errors included, carries
the minimum and maximum, which is all python-ironic-inspector-client reads
before it calls.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metalforge.api.errors import send_json_error
from metalforge.api.inspector.errors import error_body

MIN_VERSION = (1, 0)
MAX_VERSION = (1, 18)
VERSION_HEADER = b"x-openstack-ironic-inspector-api-version"
MIN_HEADER = (b"x-openstack-ironic-inspector-api-minimum-version", b"1.0")
MAX_HEADER = (b"x-openstack-ironic-inspector-api-maximum-version", b"1.18")
_PATTERN = re.compile(r"^(\d+)\.(\d+)$")


def _requested(scope: Scope) -> tuple[int, int] | str:
    """The version asked for, or the error message for a malformed value."""
    for name, value in scope["headers"]:
        if name == VERSION_HEADER:
            text = value.decode("latin-1").strip()
            if text.lower() == "latest":
                return MAX_VERSION
            match = _PATTERN.match(text)
            if match is None:
                return "Malformed API version: expected string in form of X.Y or latest"
            return int(match.group(1)), int(match.group(2))
    return MAX_VERSION


def requested_version(scope: Scope) -> tuple[int, int]:
    """The version a request asked for (the middleware already refused a bad one)."""
    found = _requested(scope)
    return MAX_VERSION if isinstance(found, str) else found


class InspectorVersionMiddleware:
    """Pure ASGI, outermost: refuses bad versions and stamps the range on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = _requested(scope)
        headers = [MIN_HEADER, MAX_HEADER]
        if isinstance(found, str):
            await send_json_error(send, 400, error_body(found), headers)
            return
        if not MIN_VERSION <= found <= MAX_VERSION:
            message = (
                f"Unsupported API version {found[0]}.{found[1]}, supported range is "
                f"{MIN_VERSION[0]}.{MIN_VERSION[1]} to {MAX_VERSION[0]}.{MAX_VERSION[1]}"
            )
            await send_json_error(send, 406, error_body(message), headers)
            return

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers]
            await send(message)

        await self.app(scope, receive, stamped)
