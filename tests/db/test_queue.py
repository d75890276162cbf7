"""The work-item queue on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from metalforge.db import queue
from metalforge.db.engine import Database
from metalforge.db.models import WorkItem

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
    [retaken] = _claim(db, "c2")
    assert retaken.id == item.id
    with db.write() as session:
        assert not queue.finish(session, item.id, "c1")  # the old owner lost it
        assert queue.finish(session, item.id, "c2")
    db.dispose()
