"""An HTTP answer with another status than the caller expected.

An ``AssertionError``: the harnesses that raise it (the Keystone harness,
the tests' API helpers) use it where an unexpected answer is a failed check.
"""

from __future__ import annotations


class HttpError(AssertionError):
    """The API answered with an unexpected status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body
