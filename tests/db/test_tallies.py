"""Counts kept in memory, added to the cluster's totals by each process's flush."""

from __future__ import annotations

import pytest

from metalforge.db import tallies as db_tallies
from metalforge.db.engine import Database
from metalforge.tallies import FLOWS_STARTED, STEP_DURATION, Tally


def _totals(db: Database) -> dict[tuple[str, str, str], float]:
    with db.snapshot() as connection:
        return {(n, labels, part): v for n, labels, part, v in db_tallies.totals(connection)}


def _count_then_fail(db: Database) -> None:
    with db.write() as session:
        db_tallies.count_on_commit(session, db_tallies.counted(FLOWS_STARTED, ("clean",)))
        raise RuntimeError("rolled back")


def test_counts_of_a_transaction_are_taken_only_when_it_commits(db: Database) -> None:
    with db.write() as session:
        db_tallies.count_on_commit(session, db_tallies.counted(FLOWS_STARTED, ("clean",)))
    with pytest.raises(RuntimeError, match="rolled back"):
        _count_then_fail(db)
    db.flush_tally()
    assert _totals(db) == {
        ("metalforge_flows_started", "clean", ""): 1.0,
        # The committed write, not the rolled-back one, nor the flush.
        ("metalforge_db_write_transactions", "", ""): 1.0,
    }
    db.flush_tally()
    assert _totals(db)[("metalforge_db_write_transactions", "", "")] == 1.0, "flushes count not"


def test_two_processes_add_to_the_same_totals(db: Database) -> None:
    other = Database(db.url)  # another process's way into the same database
    try:
        db.tally.count(FLOWS_STARTED, ("deploy",))
        other.tally.count(FLOWS_STARTED, ("deploy",), by=2)
        db.tally.observe(STEP_DURATION, ("deploy", "erase_devices"), 42.0)
        other.tally.observe(STEP_DURATION, ("deploy", "erase_devices"), 0.5)
        db.flush_tally()
        other.flush_tally()
        db.flush_tally()  # nothing new: adds nothing
    finally:
        other.dispose()
    totals = _totals(db)
    assert totals[("metalforge_flows_started", "deploy", "")] == 3.0
    step = ("metalforge_step_duration_seconds", "deploy\x1ferase_devices")
    assert totals[(*step, "count")] == 2.0
    assert totals[(*step, "sum")] == 42.5
    assert totals[(*step, "1.0")] == 1.0  # cumulative: only the 0.5 s run is <= 1 s
    assert totals[(*step, "60.0")] == 2.0
    assert totals[(*step, "+Inf")] == 2.0


def test_counts_a_failed_flush_could_not_store_wait_for_the_next(sqlite_url: str) -> None:
    db = Database(sqlite_url)  # no schema yet: the flush fails
    try:
        db.tally.count(FLOWS_STARTED, ("inspect",))
        with pytest.raises(Exception, match="metric_totals"):
            db.flush_tally()
        db.upgrade()
        db.flush_tally()
        assert _totals(db) == {("metalforge_flows_started", "inspect", ""): 1.0}
    finally:
        db.dispose()


def test_labels_must_match_the_declaration() -> None:
    with pytest.raises(ValueError, match="takes labels"):
        Tally().count(FLOWS_STARTED, ("clean", "extra"))
