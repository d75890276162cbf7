"""Microversion gates of whole resources, declared on a route before its guard.

Ironic checks a resource's microversion before anything else: below it, a
read finds no such path (404) and a write is not allowed (405), whoever asks
and whatever the body holds.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request

from metalforge.api.versions import Version, request_version
from metalforge.errors import RequestError, not_found


def absent_before(since: Version, message: str) -> Any:
    """The dependency of a read that does not exist before ``since`` (404 ``message``)."""

    def gate(request: Request) -> None:
        if request_version(request) < since:
            raise not_found(message)

    return Depends(gate)


def refused_before(since: Version, message: str) -> Any:
    """The dependency of a write not allowed before ``since`` (405 ``message``)."""

    def gate(request: Request) -> None:
        if request_version(request) < since:
            raise RequestError(405, message)

    return Depends(gate)
