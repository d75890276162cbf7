"""Refusals every layer may raise, each carrying the HTTP status it answers with.

A request is refused deep down (a service finds the node locked, a flow's
request check finds a field it does not take) and answered at the top; the
API renders these in Ironic's error format. ``NodeLocked`` is the one
"node locked" error: the conductor's ``acquire`` raises it, service functions
raise it when they find a reservation, and the API's short lock wait retries
on it before answering 409.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class RequestError(Exception):
    """A request that cannot be met: answered with ``status`` and ``message``."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class NodeLocked(RequestError):
    """Another holder has the node's reservation (409)."""

    def __init__(self, node: int | str, holder: str | None) -> None:
        super().__init__(
            409,
            f"Node {node} is locked by host {holder}, please retry after the "
            "current operation is completed.",
        )
        self.holder = holder


def bad_request(message: str) -> RequestError:
    return RequestError(400, message)


def forbidden(message: str) -> RequestError:
    return RequestError(403, message)


def not_found(message: str) -> RequestError:
    return RequestError(404, message)


def not_acceptable(message: str) -> RequestError:
    return RequestError(406, message)


def conflict(message: str) -> RequestError:
    return RequestError(409, message)


_SCHEMA_WORDS = {
    "string_too_long": "is too long",
    "too_long": "is too long",
    "string_too_short": "is too short",
    "too_short": "is too short",
}
"""Pydantic's length errors in jsonschema's words: Ironic validates bodies with jsonschema,
and clients match on ``is too long`` and ``is too short``."""


def validation_reason(error: Mapping[str, Any]) -> str:
    """One pydantic validation error's reason, in Ironic's words where clients match on them
    (``'xxx' is too long (String should have at most 80 characters)``)."""
    words = _SCHEMA_WORDS.get(str(error.get("type")))
    if words is None:
        return str(error.get("msg"))
    return f"{error.get('input')!r} {words} ({error.get('msg')})"
