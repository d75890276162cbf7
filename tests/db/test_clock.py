"""The database clock: the offset it measures, and a database that cannot answer."""

from __future__ import annotations

import datetime as dt

from metalforge.db.clock import DatabaseClock

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
