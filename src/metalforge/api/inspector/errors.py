"""Errors as ironic-inspector writes them: ``{"error": {"message": "..."}}``.

python-ironic-inspector-client reads ``error.message``; a body in Ironic's
shape would make it say the URL is Ironic's rather than the inspector's.
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from metalforge.errors import RequestError

LOG = logging.getLogger(__name__)


def error_body(message: str) -> bytes:
    return json.dumps({"error": {"message": message}}).encode()


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    body = error_body(message)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def install(app: FastAPI) -> None:
    """Every error of the inspector app in the inspector's shape."""

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> Response:
        # Headers too: a 503's Retry-After tells the ramdisk when to send its report again.
        return error_response(exc.status, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = "/".join(str(p) for p in first.get("loc", ()))
        return error_response(400, f"Invalid request: {where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return error_response(404, "The requested URL was not found on the server.")
        if exc.status_code == 405:
            return error_response(405, "The method is not allowed for the requested URL.")
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        LOG.exception("unexpected error serving %s %s", request.method, request.url.path)
        return error_response(500, "Internal server error")
