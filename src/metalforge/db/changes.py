"""Wake-ups for the PXE filter: a port, an introspection record, a ramdisk boot's start or
end, or a node's deletion committed.

The filter's desired state is read from the database; what it needs from
here is only "look again, now", as soon as a write that may change that
state has committed. Two ways, one per engine:

- PostgreSQL: triggers (migration 0011) ``NOTIFY`` on ``CHANNEL`` for
  exactly those writes; PostgreSQL delivers them at commit, to every filter
  host listening, whichever process wrote.
- SQLite (the embedded, one-process default): this process's own writes are
  watched; a transaction that wrote one of the watched tables calls back
  after it committed. Another process writing the same file is not seen;
  the filter's periodic resync covers that.

A missed wake-up costs at most one resync period, never correctness.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import event

from metalforge.db.engine import Database
from metalforge.db.notify import Listener

CHANNEL = "metalforge_pxe_filter"
"""The channel the triggers of migration 0011 notify."""

_WATCHED_WRITE = re.compile(
    r"^\s*(?:(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(?:ports|introspections)\b"
    r"|DELETE\s+FROM\s+\"?nodes\b"
    # A ramdisk boot beginning or ending; not a heartbeat, which leaves booted_at alone.
    r"|INSERT\s+INTO\s+\"?agent_sessions\b"
    r"|UPDATE\s+\"?agent_sessions\"?\s+SET\s+(?:(?!\bWHERE\b).)*\bbooted_at\b)",
    re.IGNORECASE | re.DOTALL,
)
"""The SQL statements that may change what the filter allows (the triggers' list)."""


def changes_filter(statement: str) -> bool:
    """Whether ``statement`` writes what the PXE filter is computed from."""
    return _WATCHED_WRITE.match(statement) is not None


class ChangeFeed:
    """Calls ``on_change`` after each committed write that may change the filter."""

    def __init__(self, db: Database, on_change: Callable[[], None]) -> None:
        self._db = db
        self._on_change = on_change
        self._listener: Listener | None = None
        self._pending = threading.local()
        self._active = False

    def start(self) -> None:
        if not self._db.is_sqlite:
            self._listener = Listener(self._db.url, self._on_change, channel=CHANNEL)
            self._listener.start()
            return
        self._active = True
        event.listen(self._db.write_engine, "after_cursor_execute", self._saw_statement)
        event.listen(self._db.write_engine, "rollback", self._rolled_back)
        self._db.after_commit(self._committed)

    @property
    def listening(self) -> threading.Event | None:
        """PostgreSQL: set while the LISTEN connection is up (tests wait for it)."""
        return None if self._listener is None else self._listener.listening

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.stop()
        if self._active:
            self._active = False
            event.remove(self._db.write_engine, "after_cursor_execute", self._saw_statement)
            event.remove(self._db.write_engine, "rollback", self._rolled_back)

    def _saw_statement(self, _conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if changes_filter(statement):
            self._pending.dirty = True

    def _rolled_back(self, _conn: Any) -> None:
        self._pending.dirty = False

    def _committed(self) -> None:
        if getattr(self._pending, "dirty", False):
            self._pending.dirty = False
            if self._active:
                self._on_change()
