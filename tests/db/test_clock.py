"""The database clock: the offset it measures, and a database that cannot answer."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time

from sqlalchemy.pool import QueuePool

from metalforge.db.clock import RESYNC_SECONDS, DatabaseClock
from metalforge.db.engine import Database
from metalforge_lab.postgres import PostgresCluster

LOCAL = dt.datetime(2026, 11, 24, 12, 0, 0, tzinfo=dt.UTC)


def test_the_offset_to_the_database_is_measured_and_added() -> None:
    clock = DatabaseClock(lambda: LOCAL + dt.timedelta(minutes=3), local=lambda: LOCAL)
    assert clock.now() == LOCAL + dt.timedelta(minutes=3)
    assert clock.offset == dt.timedelta(minutes=3)


def test_without_a_database_clock_the_local_one_is_used() -> None:
    clock = DatabaseClock(None, local=lambda: LOCAL)
    assert clock.now() == LOCAL
    assert clock.offset == dt.timedelta(0)


def test_a_database_that_cannot_answer_leaves_the_last_offset() -> None:
    answers = [LOCAL + dt.timedelta(seconds=30)]

    def database_time() -> dt.datetime:
        if not answers:
            raise ConnectionError("the database is restarting")
        return answers.pop()

    clock = DatabaseClock(database_time, local=lambda: LOCAL)
    assert clock.now() == LOCAL + dt.timedelta(seconds=30)
    clock.sync()  # fails: the time is still told, with the offset measured before
    assert clock.now() == LOCAL + dt.timedelta(seconds=30)


def test_a_remeasurement_under_way_does_not_hold_up_other_callers() -> None:
    entered = threading.Event()
    release = threading.Event()
    answers = iter([LOCAL + dt.timedelta(seconds=5), LOCAL + dt.timedelta(seconds=9)])

    def database_time() -> dt.datetime:
        value = next(answers)
        if value == LOCAL + dt.timedelta(seconds=9):
            entered.set()
            release.wait(60)
        return value

    clock = DatabaseClock(database_time, local=lambda: LOCAL)
    assert clock.now() == LOCAL + dt.timedelta(seconds=5)  # the first is waited for
    clock._synced_at = time.monotonic() - RESYNC_SECONDS - 1  # due again
    measuring = threading.Thread(target=clock.now)
    measuring.start()
    assert entered.wait(60)
    # Meanwhile another caller is told the time at once, with the last offset.
    assert clock.now() == LOCAL + dt.timedelta(seconds=5)
    release.set()
    measuring.join(60)
    assert clock.now() == LOCAL + dt.timedelta(seconds=9)


def test_the_clock_needs_no_connection_of_the_full_pool(postgres: PostgresCluster) -> None:
    name = f"mf_clock_{os.getpid()}"
    postgres.execute(f"CREATE DATABASE {name}")
    db = Database(postgres.url(name), pool_size=1)
    try:
        db.now()
        holders = [db.write_engine.connect() for _ in range(3)]  # the pool: 1 + 2 overflow
        try:
            db.clock._synced_at = time.monotonic() - RESYNC_SECONDS - 1
            pool = db.write_engine.pool
            assert isinstance(pool, QueuePool)
            pool._timeout = 1  # a wait for the pool would fail at once
            before = time.monotonic()
            db.now()  # measured on a connection of its own
            # (A failed measurement would leave it due again a few seconds from now.)
            assert (db.clock._synced_at or 0) >= before
        finally:
            for connection in holders:
                connection.close()
    finally:
        db.dispose()
