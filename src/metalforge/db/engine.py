"""Engines, sessions and schema upgrades for SQLite (WAL) and PostgreSQL.

SQLite allows one writer at a time. A transaction that reads and then writes
must take the write lock when it begins (``BEGIN IMMEDIATE``), otherwise two
such transactions deadlock on the upgrade and one fails with "database is
locked". ``Database.write()`` therefore begins immediately while
``Database.read()`` takes a plain snapshot that never blocks writers.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from metalforge.db import tallies
from metalforge.db.clock import DatabaseClock
from metalforge.db.models import utcnow
from metalforge.tallies import DB_WRITES, Tally

_UNCOUNTED = "metalforge.uncounted"
"""``Session.info`` key: the transaction is a counters' flush, not counted as a write
(each flush would otherwise count one more, and flush again)."""

T = TypeVar("T")

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_DATABASE_TIME = text("SELECT statement_timestamp()")


def _json_dumps(value: Any) -> str:
    """JSON columns are written with orjson (the standard library for what it refuses).

    A node has eleven JSON columns: a page of a thousand nodes decodes eleven
    thousand documents, and every conductor step writes some.
    """
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value)


class UnreadableJson(ValueError):
    """A stored JSON document that neither reader accepts."""


def decode_json(text: str | bytes) -> Any:
    """Read a JSON column back with the semantics it was written with.

    orjson first (fast); what it refuses (integers beyond 64 bits, which the
    standard library wrote) goes to the standard library. A document neither
    reads raises ``UnreadableJson``, which callers handle per document.
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UnreadableJson(f"stored JSON cannot be read: {str(exc)[:200]}") from None


JSON_CODEC: dict[str, Any] = {
    "json_serializer": _json_dumps,
    "json_deserializer": decode_json,
    # Errors and logs never carry bound values: they hold BMC credentials.
    "hide_parameters": True,
}

SINGLE_STATEMENT = "metalforge_single_statement"
"""Execution option of a SQLite read that is one statement: no BEGIN is sent."""


def _sqlite_engine(url: str, begin: str) -> Engine:
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 60},
        pool_size=20,
        max_overflow=40,
        **JSON_CODEC,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get(SINGLE_STATEMENT):
            return  # one SELECT is a consistent snapshot on its own
        conn.exec_driver_sql(begin)

    return engine


def now_for(session: Session) -> dt.datetime:
    """The database's time for code that holds only a session (see ``db.clock``)."""
    clock = session.info.get("clock")
    return clock.now() if isinstance(clock, DatabaseClock) else utcnow()


def _private_file(path: Path) -> None:
    """Create the SQLite file (and its directory) readable by this user only.

    The file holds BMC credentials, and SQLite would create it with the
    process's umask (often 022). Its ``-wal`` and ``-shm`` companions are
    created by SQLite with the main file's permissions.
    """
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    for companion in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if companion.exists():
            companion.chmod(0o600)


@dataclass(frozen=True)
class RetryPolicy:
    """How long to ride out a database out of reach: ``count`` attempts in a row may
    fail, ``interval`` seconds apart (``database.retry_*`` settings)."""

    count: int = 20
    interval: float = 3.0


def lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached or dropped the connection
    (worth trying again), rather than refusing what was asked (never retried)."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, OperationalError | InterfaceError)


class Database:
    """The process's way into the database: one per service, passed down."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 20,
        local_clock: Callable[[], dt.datetime] = utcnow,
        retry: RetryPolicy | None = None,
        connect_timeout: int = 10,
    ) -> None:
        """``local_clock``: this host's UTC clock (tests run hosts whose clock is off)."""
        self.retry = retry or RetryPolicy()
        """How long callers that can wait ride out an outage (``retrying``)."""
        parsed = make_url(url)
        self.url = url
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            if parsed.database and parsed.database != ":memory:":
                _private_file(Path(parsed.database))
            self.write_engine = _sqlite_engine(url, "BEGIN IMMEDIATE")
            self.read_engine = _sqlite_engine(url, "BEGIN")
        else:
            self.write_engine = create_engine(
                url,
                pool_size=pool_size,
                max_overflow=pool_size * 2,
                pool_pre_ping=True,
                connect_args={"connect_timeout": connect_timeout},
                **JSON_CODEC,
            )
            self.read_engine = self.write_engine
        # The clock's reads have connections of their own: ``now()`` is called
        # inside transactions, and a second connection taken from a pool that
        # those transactions filled would wait for one of them to end.
        self._clock_engine = (
            None
            if self.is_sqlite
            else create_engine(
                url, poolclass=NullPool, connect_args={"connect_timeout": connect_timeout}
            )
        )
        self.clock = DatabaseClock(None if self.is_sqlite else self._database_time, local_clock)
        """The time hosts compare (heartbeats, leases): see ``db.clock``."""
        # Sessions carry the clock, so code given only a session (the work
        # queue) stamps what other hosts compare with the database's time.
        self._write = sessionmaker(
            self.write_engine, expire_on_commit=False, info={"clock": self.clock}
        )
        self._write_mutex = threading.Lock() if self.is_sqlite else None
        self._read = sessionmaker(
            self.read_engine, expire_on_commit=False, info={"clock": self.clock}
        )
        self._after_commit: list[Callable[[], None]] = []
        self._flusher = tallies.Flusher(self.flush_tally)
        self.tally = Tally(on_first_count=self._flusher.start)
        """What this process counted for ``GET /metrics`` (``metalforge.tallies``)."""

        self._also_flushed: list[Tally] = []

    def also_flush(self, tally: Tally) -> None:
        """Flush ``tally`` (counts made where there is no database) with this one's."""
        if tally not in self._also_flushed:
            self._also_flushed.append(tally)
        self._flusher.start()

    def flush_tally(self) -> None:
        """Add this process's counts to the cluster's totals now (``db.tallies``)."""
        deltas = self.tally.take()
        for other in self._also_flushed:
            for key, value in other.take().items():
                deltas[key] = deltas.get(key, 0.0) + value
        if not deltas:
            return
        try:
            with self.write() as session:
                session.info[_UNCOUNTED] = True
                tallies.store(session.connection(), deltas)
        except Exception:  # re-raised: whatever failed, the counts go back
            self.tally.give_back(deltas)
            raise

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` in the writing thread after each ``write`` transaction commits
        (what was written is visible to every reader by then)."""
        self._after_commit.append(callback)

    def _committed(self) -> None:
        for callback in self._after_commit:
            try:
                callback()
            except Exception:  # the write is committed: a listener must not fail it
                logging.getLogger(__name__).exception("an after-commit callback failed")

    def now(self) -> dt.datetime:
        """Aware UTC on the database's clock."""
        return self.clock.now()

    def _database_time(self) -> dt.datetime:
        assert self._clock_engine is not None
        with self._clock_engine.connect() as connection:
            value = connection.scalar(_DATABASE_TIME)
        if not isinstance(value, dt.datetime):
            raise TypeError(f"the database gave {value!r} for its time")
        return value

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A transaction that may write; committed on success, rolled back on error.

        On SQLite, writers of this process queue on a mutex first: SQLite's own
        busy handler polls with growing sleeps, which under many concurrent
        writers costs far more than the writes themselves.
        """
        if self._write_mutex is None:
            with self._write() as session, session.begin():
                yield session
        else:
            # The session is built before the mutex is taken and closed after it is
            # given back: only the transaction itself runs while other writers wait.
            with self._write() as session, self._write_mutex, session.begin():
                yield session
        try:
            for count in tallies.take_pending(session):
                count(self.tally)
            if not session.info.get(_UNCOUNTED):
                self.tally.count(DB_WRITES, ())
        except Exception:  # committed: a miscounted metric must not make it look failed
            logging.getLogger(__name__).exception("a committed write's counts were lost")
        self._committed()

    def retrying(self, attempt: Callable[[], T], stopping: threading.Event) -> T:
        """``attempt()``, tried again while the database is out of reach, up to
        ``retry.count`` failures ``retry.interval`` apart; a stop (``stopping``) ends
        the waiting. ``attempt`` must be one whole transaction, safe to run again."""
        failures = 0
        while True:
            try:
                return attempt()
            except Exception as exc:  # re-raised unless lost_connection says try again
                if not lost_connection(exc):
                    raise
                failures += 1
                if failures >= self.retry.count:
                    raise
                logging.getLogger(__name__).warning(
                    "the database is out of reach (%d of %d): %s; trying again in %g s",
                    failures,
                    self.retry.count,
                    type(exc).__name__,
                    self.retry.interval,
                )
                if stopping.wait(self.retry.interval):
                    raise

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only snapshot; never blocks writers."""
        with self._read() as session, session.begin():
            yield session

    @contextmanager
    def snapshot(self, *, single_statement: bool = False) -> Iterator[Connection]:
        """``read`` as a Core connection, for the hottest read paths.

        A status poll's query takes a few microseconds in SQLite; building and
        closing an ORM session around it cost more than the rest of the route.
        With ``single_statement`` (the caller runs exactly one query) SQLite
        needs no transaction around it: a lone SELECT sees one snapshot.
        """
        with self.read_engine.connect() as connection:
            if single_statement and self.is_sqlite:
                connection.execution_options(**{SINGLE_STATEMENT: True})
            with connection.begin():
                yield connection

    def upgrade(self, revision: str = "head") -> None:
        """Bring the schema to ``revision``, the newest by default (idempotent).

        On SQLite a migration that alters a table rebuilds it (copy, drop,
        rename); with foreign keys enforced the drop would fire the ``ON
        DELETE`` actions of the rows that reference it (a node's ports and
        history). So, as SQLite's own procedure says, enforcement is off for
        the upgrade (set outside the transaction, where the pragma works) and
        every reference is checked before the commit.
        """
        # Imported here: only the processes that upgrade pay for loading Alembic.
        from alembic import command
        from alembic.config import Config

        with self.write_engine.connect() as connection:
            raw = connection.connection.driver_connection
            sqlite = connection.dialect.name == "sqlite"
            if sqlite:
                raw.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
            try:
                cfg = Config()
                cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
                cfg.attributes["connection"] = connection
                command.upgrade(cfg, revision)
                if sqlite:
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if broken:
                        raise RuntimeError(f"the upgrade left broken references: {broken[:5]}")
                connection.commit()
            finally:
                if sqlite:
                    connection.rollback()
                    raw.execute("PRAGMA foreign_keys=ON")  # type: ignore[union-attr]

    def dispose(self) -> None:
        self._flusher.stop()
        try:
            self.flush_tally()
        except Exception:  # shutdown goes on to dispose of the engines
            logging.getLogger(__name__).warning("counted metrics lost at shutdown", exc_info=True)
        self.write_engine.dispose()
        self.read_engine.dispose()
        if self._clock_engine is not None:
            self._clock_engine.dispose()
