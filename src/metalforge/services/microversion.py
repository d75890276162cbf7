"""The API microversion a request was made at, as the services compare it.

Services gate some behaviour on it (names as identifiers from 1.5, port
names from 1.88, some request fields), so it is a plain value here, parsed
and negotiated by the API.
"""

from __future__ import annotations

Version = tuple[int, int]

NEWEST: Version = (1, 115)
"""The newest Ironic API version metalforge speaks (what ``latest`` means)."""


def fmt(version: Version) -> str:
    return f"{version[0]}.{version[1]}"
