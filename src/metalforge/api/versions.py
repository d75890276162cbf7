"""Microversions: negotiation from either request header, headers on every response.

Both ``X-OpenStack-Ironic-API-Version: 1.N`` (ironicclient, IPA) and
``OpenStack-API-Version: baremetal 1.N`` (openstacksdk; wins when both are
sent) are accepted; ``latest`` means the maximum, no header means 1.1. A
version outside the range, or one that cannot be parsed, is a 406; every
response carries the minimum and maximum so ironicclient can negotiate.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metalforge.api.errors import error_body, routing_error_body, send_json_error
from metalforge.services import lookup
from metalforge.services.microversion import NEWEST
from metalforge.services.microversion import Version as Version
from metalforge.services.microversion import fmt as fmt

MIN_VERSION: Version = (1, 1)
MAX_VERSION: Version = NEWEST
DEFAULT_VERSION: Version = (1, 1)

MIN_HEADER = b"x-openstack-ironic-api-minimum-version"
MAX_HEADER = b"x-openstack-ironic-api-maximum-version"
VERSION_HEADER = b"x-openstack-ironic-api-version"
VERSION_REQUEST_HEADERS = (VERSION_HEADER, b"openstack-api-version")

_PATTERN = re.compile(r"^(\d+)\.(\d+)$")
REQUEST_ID_HEADER = b"x-openstack-request-id"
GLOBAL_REQUEST_ID = re.compile(
    r"^req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)
"""A request id as OpenStack services pass them on (``req-`` and a UUID), and nothing
else: it ends up on kernel command lines."""


class VersionError(ValueError):
    def __init__(self, message: str, *, parsable: bool) -> None:
        super().__init__(message)
        self.parsable = parsable


def parse(headers: dict[bytes, bytes]) -> Version:
    """The microversion the request asks for."""
    raw: str | None = None
    standard = headers.get(b"openstack-api-version")
    if standard is not None:
        text = standard.decode("latin-1").strip()
        service, _, value = text.partition(" ")
        if service.lower() == "baremetal" and value.strip():
            raw = value.strip()
    if raw is None:
        legacy = headers.get(VERSION_HEADER)
        if legacy is not None:
            raw = legacy.decode("latin-1").strip()
    if raw is None:
        return DEFAULT_VERSION
    if raw.lower() == "latest":
        return MAX_VERSION
    shown = raw if len(raw) <= 40 else f"{raw[:37]}..."
    match = _PATTERN.match(raw)
    if not match:
        raise VersionError(
            f"Invalid value for X-OpenStack-Ironic-API-Version header: {shown}", parsable=False
        )
    # Past nine digits a part is out of range whatever it says (and converting
    # thousands of digits to an integer is refused by Python, or slow).
    major, minor = (int(part) if len(part) <= 9 else 10**9 for part in match.groups())
    version = (major, minor)
    if version < MIN_VERSION or version > MAX_VERSION:
        raise VersionError(
            f"Version {shown} was requested but the minor version is not supported by this "
            f"service. The supported version range is: [{fmt(MIN_VERSION)}, {fmt(MAX_VERSION)}].",
            parsable=True,
        )
    return version


class VersionMiddleware:
    """Pure ASGI middleware: cheap enough to sit in front of every request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        range_headers = [
            (MIN_HEADER, fmt(MIN_VERSION).encode()),
            (MAX_HEADER, fmt(MAX_VERSION).encode()),
        ]
        try:
            version = parse(headers)
        except VersionError as exc:
            body = routing_error_body(406, str(exc))
            extra = range_headers if exc.parsable else []
            await send_json_error(send, 406, body, extra)
            return
        scope.setdefault("state", {})["version"] = version
        scope_path = scope["path"]
        scope = _without_json_suffix(scope, headers, version)
        request_id = f"req-{uuid.uuid4()}".encode()
        given = headers.get(REQUEST_ID_HEADER, b"").decode("latin-1")
        # The caller's id (a client carrying one across services) when it is well formed;
        # else this request's own. Flows carry it to the agent's logs.
        scope["state"]["global_request_id"] = (
            given if GLOBAL_REQUEST_ID.match(given) else request_id.decode()
        )
        extra_headers = [
            *range_headers,
            (VERSION_HEADER, fmt(version).encode()),
            (REQUEST_ID_HEADER, request_id),
            (b"openstack-request-id", request_id),
        ]

        dropped = lookup.JSON_SUFFIX_DROPPED.set(scope["path"] != scope_path)
        try:
            await _serve_with_headers(self.app, scope, receive, send, extra_headers)
        finally:
            lookup.JSON_SUFFIX_DROPPED.reset(dropped)


JSON_SUFFIX_UNTIL: Version = (1, 90)
"""The last version at which ``/v1/nodes/<uuid>.json`` means ``/v1/nodes/<uuid>`` (Ironic's)."""


def _without_json_suffix(scope: Scope, headers: dict[bytes, bytes], version: Version) -> Scope:
    """The request with a trailing ``.json`` dropped, when a client asked for 1.90 or older.

    Ironic once read ``.json`` as a content type; up to 1.90 it still strips
    it from any path when the client named such a version (not when it named
    none). A node, port group, allocation or deploy template not found by the
    shortened name is then looked for by its whole name
    (``lookup.JSON_SUFFIX_DROPPED``), as Ironic does.
    """
    named = any(h in headers for h in VERSION_REQUEST_HEADERS)
    path: str = scope["path"].rstrip("/")
    if not named or version > JSON_SUFFIX_UNTIL or not path.endswith(".json"):
        return scope
    if not path.startswith("/v1/") and path.count("/") < 2:
        return scope  # /openapi.json and the like are documents, not resources
    stripped = path[: -len(".json")]
    return {**scope, "path": stripped, "raw_path": stripped.encode()}


async def _serve_with_headers(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, extra: list[tuple[bytes, bytes]]
) -> None:
    """Run ``app`` adding ``extra`` headers to its response, a 500 included."""
    started = False

    async def send_with_headers(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
            message["headers"] = [*message.get("headers", []), *extra]
        await send(message)

    try:
        await app(scope, receive, send_with_headers)
    except Exception as exc:  # re-raised: this only adds the version headers
        # Starlette answers unhandled errors outside every user middleware, so
        # that 500 would lack the version headers: answer it here instead. The
        # exception still propagates (logging, test clients), and the outer
        # handler sees the response as started and does not send a second one.
        if not started:
            body = error_body(500, f"Internal error: {type(exc).__name__}")
            await send_with_headers(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
        raise


def request_version(request: Any) -> Version:
    """The negotiated version of a FastAPI request."""
    version: Version = request.state.version
    return version


def global_request_id(scope_state: Any) -> str | None:
    """The request's global id, as ``VersionMiddleware`` left it in the request's state."""
    value = getattr(scope_state, "global_request_id", None)
    return value if isinstance(value, str) else None
