"""What a JSON document the service stores may be: storable, and within the limits.

A request body and the document a PATCH leaves are held to the same rules:
values that can be stored and read back, no deeper than ``api.max_json_depth``,
a patched document no larger than ``api.max_request_body_size``. The API
sets the serving app's limits for each request (``BODY_LIMITS``); its body
models and the services' patches read them.
"""

from __future__ import annotations

import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BodyLimits:
    """What a request body, or a document a patch leaves, may be (``api.*`` settings)."""

    max_depth: int = 25
    """Deepest nesting of objects and lists (``api.max_json_depth``)."""
    max_document: int = 1024 * 1024
    """Largest document a patch may leave, in bytes (``api.max_request_body_size``)."""


BODY_LIMITS: ContextVar[BodyLimits] = ContextVar("body_limits", default=BodyLimits())  # noqa: B039 - frozen
"""The serving app's limits, set for each request by its guard: validators reach them
without a global the settings would have to write."""
INT_RANGE = (-(2**63), 2**64 - 1)
"""Integers a body may hold: what a 64-bit column, orjson and PostgreSQL's JSONB all read back."""


def check_storable(data: Any, *, where: str = "body", depth: int = 0) -> None:
    """Refuse JSON that parses but cannot be stored, read back or answered.

    ``json.loads`` accepts ``NaN``/``Infinity`` (which the responses cannot
    encode), integers of any size (which orjson, reading the stored value
    back, refuses past 64 bits: one such value in a queued request used to
    stop every conductor's claims), lone surrogates (which cannot be encoded
    as UTF-8) and NUL characters (which PostgreSQL refuses in text and
    JSONB). Free-form dictionaries (``extra``, ``properties``...) are not
    typed, so they are checked here, once, for every request body, with a
    nesting limit. Iterative, so that deeply nested documents cannot exhaust
    the stack.
    """
    max_depth = BODY_LIMITS.get().max_depth
    pending: list[tuple[str, Any, int]] = [(where, data, depth)]
    while pending:
        where, value, depth = pending.pop()
        where = where if len(where) <= 120 else f"{where[:117]}..."
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where}: {value} is not a valid JSON number")
        out_of_range = isinstance(value, int) and not INT_RANGE[0] <= value <= INT_RANGE[1]
        if out_of_range:
            raise ValueError(f"{where}: the integer is out of the 64-bit range")
        if isinstance(value, dict | list) and depth >= max_depth:
            raise ValueError(f"{where}: nested deeper than {max_depth} levels")
        if isinstance(value, str):
            if "\x00" in value:
                raise ValueError(f"{where}: NUL characters are not allowed")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"{where}: the text is not valid Unicode") from None
        elif isinstance(value, dict):
            for key, item in value.items():
                pending.append((where, key, depth + 1))
                pending.append((f"{where}/{key}", item, depth + 1))
        elif isinstance(value, list):
            pending.extend(
                (f"{where}/{index}", item, depth + 1) for index, item in enumerate(value)
            )
