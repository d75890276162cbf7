"""Which of a held node's columns changed since they were last written.

A task compares the node with a snapshot taken after each write, and writes
only what differs. JSON columns are kept as canonical JSON bytes, which an
in-place edit of the node's dict cannot reach, rather than as deep copies
(cheaper to take and to compare on every save).
"""

from __future__ import annotations

import copy
from typing import Any, cast

import orjson
from sqlalchemy import JSON, Table

from metalforge.db.models import Node

_NODES = cast(Table, Node.__table__)
_COLUMNS = [c.key for c in _NODES.columns if c.key not in ("id", "reservation", "epoch")]
"""What a task may change (the reservation and the epoch are the lock's)."""
_JSON_COLUMNS = frozenset(c.key for c in _NODES.columns if isinstance(c.type, JSON))
_DUMP_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _frozen(value: Any) -> Any:
    """A JSON column's value as it is now, out of reach of later in-place edits."""
    try:
        return orjson.dumps(value, option=_DUMP_OPTIONS)
    except TypeError:  # not plain JSON (orjson is stricter than the column's json)
        return ("copy", copy.deepcopy(value))


class ColumnSnapshot:
    """A node's columns as last written; ``changes`` tells what differs now."""

    def __init__(self, node: Node) -> None:
        self._saved = self._take(node)

    @staticmethod
    def _take(node: Node) -> dict[str, Any]:
        # The node holds every column in its __dict__ (it is built from a full
        # row), and reading it there skips the ORM's attribute machinery.
        values = node.__dict__
        return {
            key: _frozen(value) if key in _JSON_COLUMNS else value
            for key in _COLUMNS
            for value in (values[key],)
        }

    def retake(self, node: Node) -> None:
        """The node was just written: what it holds now is what is saved."""
        self._saved = self._take(node)

    def changes(self, node: Node) -> dict[str, Any]:
        """The columns whose value differs from the snapshot, with their new values."""
        values = node.__dict__
        changed: dict[str, Any] = {}
        for key, saved in self._saved.items():
            value = values[key]
            if (_frozen(value) if key in _JSON_COLUMNS else value) != saved:
                changed[key] = value
        return changed
