"""The cluster-wide throttle: one slot per interval, however many callers ask at once."""

from __future__ import annotations

import datetime as dt
import itertools
import threading

from metalforge.db import throttle
from metalforge.db.engine import Database
from tests.support.stack import AdjustableClock


def _slot(db: Database, interval: float) -> dt.datetime:
    with db.write() as session:
        return throttle.next_slot(session, throttle.POWER_ON, interval)


def test_slots_are_one_interval_apart_and_idle_time_is_not_banked(db_url: str) -> None:
    clock = AdjustableClock()
    db = Database(db_url, local_clock=clock)
    db.upgrade()
    try:
        first = _slot(db, 5.0)
        second = _slot(db, 5.0)
        third = _slot(db, 5.0)
        assert second - first == dt.timedelta(seconds=5)
        assert third - second == dt.timedelta(seconds=5)
        clock.advance(60)  # a quiet minute: the next caller goes at once, not 12 slots early
        later = _slot(db, 5.0)
        assert later > third
        assert abs((later - db.now()).total_seconds()) < 1.0
        assert _slot(db, 5.0) - later == dt.timedelta(seconds=5)
    finally:
        db.dispose()


def test_callers_at_once_get_distinct_slots(db_url: str) -> None:
    db = Database(db_url)
    db.upgrade()
    slots: list[dt.datetime] = []
    lock = threading.Lock()

    def take() -> None:
        slot = _slot(db, 10.0)
        with lock:
            slots.append(slot)

    try:
        threads = [threading.Thread(target=take) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ordered = sorted(slots)
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(ordered)]
        assert len(ordered) == 8
        assert all(gap >= 10.0 for gap in gaps), gaps
    finally:
        db.dispose()
