"""The work-item queue on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from metalforge.db import queue
from metalforge.db.engine import Database
from metalforge.db.models import WorkItem
from tests.support.work_items import insert_raw_item

LEASE = dt.timedelta(seconds=30)
NO_GRACE = dt.timedelta(seconds=0)


def _claim(
    db: Database,
    owner: str,
    live: list[str] | None = None,
    grace: dt.timedelta = NO_GRACE,
    lease: dt.timedelta = LEASE,
) -> list[queue.ClaimedItem]:
    with db.write() as session:
        return queue.claim(
            session,
            owner,
            limit=10,
            lease=lease,
            live_owners=live or ["c1", "c2"],
            affinity_grace=grace,
        )


def test_enqueue_claim_finish(db_url: str) -> None:
    db = Database(db_url)
    db.upgrade()
    with db.write() as session:
        queue.enqueue(session, "provision", 1, {"a": 1}, dedupe_key="provision:1")
    items = _claim(db, "c1")
    assert [(i.kind, i.node_id, i.payload, i.attempts) for i in items] == [
        ("provision", 1, {"a": 1}, 1)
    ]
    assert _claim(db, "c2") == []  # claimed items are not handed out twice
    with db.write() as session:
        assert queue.finish(session, items[0].id, "c1")
        assert not queue.finish(session, items[0].id, "c2")
        assert not queue.has_pending(session, "provision:1")
    db.dispose()


def test_duplicate_while_running_runs_again(db_url: str) -> None:
    db = Database(db_url)
    db.upgrade()
    with db.write() as session:
        queue.enqueue(session, "provision", 7, dedupe_key="provision:7")
        queue.enqueue(session, "provision", 7, dedupe_key="provision:7")
        assert len(list(session.scalars(select(WorkItem)))) == 1  # absorbed
    [item] = _claim(db, "c1")
    with db.write() as session:
        queue.enqueue(session, "provision", 7, dedupe_key="provision:7")  # arrives mid-run
    with db.write() as session:
        queue.finish(session, item.id, "c1")
    [again] = _claim(db, "c1")
    assert again.id == item.id
    assert again.attempts == 2
    db.dispose()


def test_affinity_and_expired_leases(db_url: str) -> None:
    db = Database(db_url)
    db.upgrade()
    with db.write() as session:
        queue.enqueue(session, "power", 3, preferred_owner="c1")
    grace = dt.timedelta(hours=1)
    assert _claim(db, "c2", live=["c1", "c2"], grace=grace) == []  # c1 is alive: wait for it
    assert len(_claim(db, "c2", live=["c2"], grace=grace)) == 1  # c1 is dead: take it
    with db.write() as session:
        queue.enqueue(session, "power", 5)
    [held] = _claim(db, "c1")
    assert _claim(db, "c2") == []  # held by a live conductor
    [orphan] = _claim(db, "c2", live=["c2"])  # c1 died: its claimed item is taken over
    assert orphan.id == held.id
    with db.write() as session:
        queue.enqueue(session, "power", 4)
    [item] = _claim(db, "c1", lease=dt.timedelta(seconds=-1))  # lease already over
    assert _claim(db, "c1") == []  # its own: still running in its workers
    assert _claim(db, "c2") == []  # c1 is alive: its renewals failed, not its worker
    [retaken] = _claim(db, "c2", live=["c2"])  # c1 is dead
    assert retaken.id == item.id
    with db.write() as session:
        assert not queue.finish(session, item.id, "c1")  # the old owner lost it
        assert queue.finish(session, item.id, "c2")
    db.dispose()


def test_a_live_conductors_item_is_taken_once_its_lease_is_long_stale(db_url: str) -> None:
    """A database outage longer than a lease leaves live conductors' leases expired while
    their workers still run the items; only a long-stale lease (a conductor that lost
    track of its item) is taken from a live conductor."""
    db = Database(db_url)
    db.upgrade()
    with db.write() as session:
        queue.enqueue(session, "power", 6)
    stale = -(LEASE * queue.STALE_LEASES + dt.timedelta(seconds=5))
    [item] = _claim(db, "c1", lease=-LEASE * 2)
    assert _claim(db, "c2") == []
    with db.write() as session:
        assert queue.renew(session, "c1", stale, [item.id]) == 1
    [taken] = _claim(db, "c2")
    assert taken.id == item.id
    db.dispose()


def test_a_huge_integer_in_a_payload_is_read_back_as_written(db_url: str) -> None:
    db = Database(db_url)
    db.upgrade()
    huge = 10**400
    with db.write() as session:
        queue.enqueue(session, "power", 1, {"target": "power on", "timeout": huge})
        queue.enqueue(session, "power", 2, {"target": "power on"})
    items = {item.node_id: item for item in _claim(db, "c1")}
    assert items[1].payload["timeout"] == huge
    assert items[1].unreadable is None
    assert items[2].payload == {"target": "power on"}
    db.dispose()


def test_an_unreadable_payload_is_set_aside_without_failing_the_batch(sqlite_url: str) -> None:
    # PostgreSQL refuses such a document on insert; SQLite stores any text.
    db = Database(sqlite_url)
    db.upgrade()
    with db.write() as session:
        queue.enqueue(session, "power", 1, {"target": "power on"})
    insert_raw_item(db, "power", 2, '{"target": ' + "[" * 100_000)
    insert_raw_item(db, "power", 3, "[1, 2]")
    with db.write() as session:
        queue.enqueue(session, "power", 4, {"target": "power off"})
    items = {item.node_id: item for item in _claim(db, "c1")}
    assert items.keys() == {1, 2, 3, 4}
    assert items[1].unreadable is None
    assert items[4].unreadable is None
    assert items[2].unreadable is not None
    assert "cannot be read" in items[2].unreadable
    assert items[3].unreadable == "a payload must be an object, not list"
    db.dispose()


def test_claims_of_abandoned_items_count_as_failures(db_url: str) -> None:
    db = Database(db_url)
    db.upgrade()
    with db.write() as session:
        queue.enqueue(session, "provision", 9)
    [first] = _claim(db, "c1", lease=dt.timedelta(seconds=-1))
    assert first.failures == 0
    [second] = _claim(db, "c2", lease=dt.timedelta(seconds=-1))  # c1's lease ran out
    assert second.failures == 1
    [third] = _claim(db, "c1", live=["c1"])  # c2 is dead
    assert third.failures == 2
    with db.write() as session:
        assert queue.retry(session, third.id, "c1", 0, failure="boom")
    [fourth] = _claim(db, "c1")
    assert fourth.failures == 3
    db.dispose()


def test_dead_letters_are_kept_listed_and_replayable(db_url: str) -> None:
    db = Database(db_url)
    db.upgrade()
    with db.write() as session:
        queue.enqueue(session, "provision", 5, dedupe_key="provision:5")
    [item] = _claim(db, "c1")
    with db.write() as session:
        assert not queue.bury(session, item.id, "c2", "not c2's to bury")
        assert queue.bury(session, item.id, "c1", "it failed 5 times")
        # A new request for the node is not absorbed by the dead item.
        queue.enqueue(session, "provision", 5, dedupe_key="provision:5")
        assert queue.purge_finished(session, dt.timedelta(seconds=-60)) == 0
    [fresh] = _claim(db, "c1")
    assert fresh.id != item.id
    with db.read() as session:
        [dead] = queue.entries(session, dead=True)
        [unfinished] = queue.entries(session, dead=False)
    assert (dead.id, dead.state, dead.reason) == (item.id, queue.DEAD, "it failed 5 times")
    assert unfinished.id == fresh.id
    assert unfinished.lease_owner == "c1"
    with db.write() as session:
        assert queue.replay(session, item.id)
        assert not queue.replay(session, item.id)  # no longer dead
    with db.read() as session:
        replayed = next(e for e in queue.entries(session, dead=False) if e.id == item.id)
    assert replayed.reason is None, "a fresh budget carries no old reason"
    [again] = _claim(db, "c2")
    assert (again.id, again.attempts, again.failures) == (item.id, 1, 0)
    db.dispose()


def test_the_heartbeat_renews_only_the_items_being_run(db_url: str) -> None:
    db = Database(db_url)
    db.upgrade()
    with db.write() as session:
        queue.enqueue(session, "power", 1)
        queue.enqueue(session, "power", 2)
    long_stale = -(LEASE * queue.STALE_LEASES + dt.timedelta(seconds=5))
    running, leaked = _claim(db, "c1", lease=long_stale)
    with db.write() as session:
        assert queue.renew(session, "c1", LEASE, [running.id]) == 1
    [retaken] = _claim(db, "c2")  # the one nobody runs goes stale and is claimed again
    assert retaken.id == leaked.id
    db.dispose()
