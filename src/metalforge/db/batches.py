"""Reading rows for many ids at once, a bounded ``IN`` list at a time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

IN_LIST_LIMIT = 500
"""Ids per ``IN (...)`` list: well under SQLite's bound on query parameters."""


def in_batches(ids: Sequence[T]) -> Iterator[Sequence[T]]:
    """``ids`` (or names) in slices of at most ``IN_LIST_LIMIT``, for one query each."""
    for start in range(0, len(ids), IN_LIST_LIMIT):
        yield ids[start : start + IN_LIST_LIMIT]
