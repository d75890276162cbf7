"""Ironic's error format, for every error the API can produce.

Clients parse ``{"error_message": "<JSON string>"}``: python-ironicclient
decodes the inner string and shows ``faultstring`` (it crashes if the value
is an object), openstacksdk reads ``faultstring`` too. Handler errors use the
``faultcode/faultstring/debuginfo`` shape; routing and version errors
Ironic's ``code/title/description`` shape.
"""

from __future__ import annotations

import json
import logging
import re
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from metalforge.db.engine import lost_connection
from metalforge.errors import RequestError, validation_reason

LOG = logging.getLogger(__name__)


def error_body(status: int, message: str) -> bytes:
    inner = {
        "faultcode": "Server" if status >= 500 else "Client",
        "faultstring": message,
        "debuginfo": None,
    }
    return json.dumps({"error_message": json.dumps(inner)}).encode()


def routing_error_body(status: int, message: str) -> bytes:
    title = HTTPStatus(status).phrase
    inner = {"code": status, "title": title, "description": message}
    return json.dumps({"error_message": json.dumps(inner)}).encode()


async def send_json_error(
    send: Any, status: int, body: bytes, extra_headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """Answer from plain ASGI code (middlewares that refuse before any route runs)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(extra_headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None, *, routing: bool = False
) -> Response:
    body = routing_error_body(status, message) if routing else error_body(status, message)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _describe_validation(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body",)]
        where = "/".join(loc) or "body"
        if err.get("type") == "extra_forbidden":
            parts.append(f"Additional properties are not allowed ('{loc[-1]}' was unexpected)")
        elif err.get("type") == "json_invalid":
            parts.append("The request body is not valid JSON")
        elif err.get("type") == "missing":
            parts.append(f"'{loc[-1] if loc else 'body'}' is a required property")
        else:
            parts.append(f"Invalid input for field/attribute {where}: {validation_reason(err)}")
    return "; ".join(parts) or "Invalid request"


_NODE_STATE = re.compile(r"(/v1)?/nodes/[^/]+/states/[^/]+/?")
"""``PUT`` on a node state that does not exist (``states/target_raid_config``)."""

_NODE_SUBRESOURCE = re.compile(r"(?:/v1)?/nodes/[^/]+/(?P<name>[^/]+)/?")
NODE_SUBRESOURCES_SINCE: dict[str, tuple[int, int]] = {"vmedia": (1, 89)}
"""Node sub-resources some of whose methods are served: below its version, a method
none of its routes serves is a missing path (404), as Ironic routes by version first."""


def _too_old_for(request: Request) -> bool:
    match = _NODE_SUBRESOURCE.fullmatch(request.url.path)
    since = NODE_SUBRESOURCES_SINCE.get(match["name"]) if match else None
    version = getattr(request.state, "version", None)  # set by the version middleware
    return since is not None and version is not None and version < since


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)
    return error_response(exc.status, exc.message, exc.headers)


async def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return error_response(400, _describe_validation(exc))


async def _http(request: Request, exc: Exception) -> Response:
    """Only routing failures (no such path, no such method) use Ironic's routing shape;
    the rest (an unparsable or oversized body) are about the request itself, so clients
    that read only ``faultstring`` (openstacksdk) see them."""
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    status = exc.status_code
    if status == 404 and request.method == "PUT" and _NODE_STATE.fullmatch(request.url.path):
        # A state Ironic's node states controller does not have is a method it does
        # not allow there (405), not a missing resource; clients and its tests see that.
        status = 405
    if status == 405 and _too_old_for(request):
        status = 404
    if status == 404:
        message = "The resource could not be found."
    elif status == 405:
        message = (
            "The server could not comply with the request since it is either "
            "malformed or otherwise incorrect."
        )
    else:
        return error_response(status, str(exc.detail), headers)
    return error_response(status, message, headers, routing=True)


async def _database(request: Request, exc: Exception) -> Response:
    """A database out of reach is a 503 the client may retry: the transaction did not
    commit, so nothing changed. Any other database error is unexpected."""
    if not lost_connection(exc):
        return await _unexpected(request, exc)
    LOG.warning(
        "the database is out of reach serving %s %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
    )
    return error_response(
        503, "The database is out of reach; try again shortly", {"Retry-After": "5"}
    )


async def _unexpected(request: Request, exc: Exception) -> Response:
    LOG.exception("unexpected error serving %s %s", request.method, request.url.path)
    return error_response(500, f"Internal error: {type(exc).__name__}")


def install(app: FastAPI) -> None:
    """Register handlers so that no error leaves the API in another shape."""
    app.add_exception_handler(RequestError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(DBAPIError, _database)
    app.add_exception_handler(Exception, _unexpected)
