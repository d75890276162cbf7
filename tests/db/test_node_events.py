"""The node event log: written by triggers on both engines, read once each by the cursor;
and the upkeep that trims it and the step runs."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

from sqlalchemy import delete, func, insert, select, update

from metalforge.conductor import housekeeping
from metalforge.db import events, step_runs
from metalforge.db.engine import Database
from metalforge.db.models import Node, NodeHistory, StepRun, utcnow
from tests.support.conductors import term_of
from tests.support.stack import Stack

ROLE = "table-prune"


def _add_node(db: Database, uuid: str) -> None:
    with db.write() as session:
        session.execute(
            insert(Node).values(
                uuid=uuid, driver="fake-hardware", provision_state="enroll", created_at=utcnow()
            )
        )


def test_watched_changes_add_events_and_others_do_not(db: Database) -> None:
    cursor = events.EventCursor(db, 0)
    _add_node(db, "11111111-1111-1111-1111-111111111111")
    uuid = "11111111-1111-1111-1111-111111111111"
    with db.write() as session:
        session.execute(update(Node).where(Node.uuid == uuid).values(reservation="c1", epoch=5))
    with db.write() as session:
        session.execute(update(Node).where(Node.uuid == uuid).values(provision_state="verifying"))
    with db.write() as session:
        session.execute(update(Node).where(Node.uuid == uuid).values(maintenance=True))
    with db.write() as session:
        session.execute(delete(Node).where(Node.uuid == uuid))
    rows = cursor.read()
    # Created, moved, put in maintenance, deleted: the reservation is not an event.
    assert [(r.node_uuid, r.deleted) for r in rows] == [(uuid, False)] * 3 + [(uuid, True)]
    assert cursor.read() == []


def test_a_rolled_back_change_leaves_no_event(db: Database) -> None:
    _add_node(db, "22222222-2222-2222-2222-222222222222")
    cursor = events.EventCursor(db, 0)
    cursor.read()
    try:
        with db.write() as session:
            session.execute(update(Node).values(provision_state="verifying"))
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert cursor.read() == []


def test_an_event_committed_after_a_later_one_is_still_read(db: Database) -> None:
    """PostgreSQL hands out ids before commit: id n may become visible after n + 1."""
    uuid_a, uuid_b = "33333333-3333-3333-3333-333333333333", "44444444-4444-4444-4444-444444444444"
    _add_node(db, uuid_a)
    _add_node(db, uuid_b)
    cursor = events.EventCursor(db, 0)
    cursor.read()
    if db.is_sqlite:
        return  # one writer at a time: ids commit in order
    slow_took_id = threading.Event()
    finish_slow = threading.Event()

    def slow_writer() -> None:
        with db.write() as session:
            session.execute(update(Node).where(Node.uuid == uuid_a).values(maintenance=True))
            slow_took_id.set()
            finish_slow.wait(10)

    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert slow_took_id.wait(10)
    with db.write() as session:
        session.execute(update(Node).where(Node.uuid == uuid_b).values(maintenance=True))
    first = cursor.read()
    assert [r.node_uuid for r in first] == [uuid_b]
    finish_slow.set()
    thread.join(10)
    late = cursor.read()
    assert [r.node_uuid for r in late] == [uuid_a]
    assert late[0].id < first[0].id
    assert cursor.read() == []


def test_old_events_are_pruned(db: Database) -> None:
    _add_node(db, "55555555-5555-5555-5555-555555555555")
    now = db.now().timestamp()
    _add_node(db, "58585858-5858-5858-5858-585858585858")
    with db.write() as session:
        assert events.prune(session.connection(), now - 3600) == 0
        assert events.prune(session.connection(), now + 60) == 1  # all but the newest
    with db.snapshot() as connection:
        assert events.first_id(connection) == events.last_id(connection)


def test_a_conductor_prunes_by_its_retention(sqlite_stack: Stack) -> None:
    ctx = sqlite_stack.conductor.ctx
    _add_node(sqlite_stack.db, "66666666-6666-6666-6666-666666666666")
    # Younger than the retention:
    assert housekeeping.prune_node_events(term_of(sqlite_stack.conductor, ROLE)) == 0
    _add_node(sqlite_stack.db, "77777777-7777-7777-7777-777777777777")
    ctx.settings = ctx.settings.model_copy(update={"event_retention": -1.0})
    # (The conductor's own round may prune first: only the outcome is certain.)
    housekeeping.prune_node_events(term_of(sqlite_stack.conductor, ROLE))
    with sqlite_stack.db.snapshot() as connection:
        assert events.first_id(connection) == events.last_id(connection)  # the newest stays


def test_the_upkeep_also_trims_step_runs(sqlite_stack: Stack) -> None:
    runs = [("deploy", "erase_devices", 1.0)] * (step_runs.KEPT + 3)
    with sqlite_stack.db.write() as session:
        step_runs.record(session.connection(), "fake-hardware", runs)
    housekeeping.prune(term_of(sqlite_stack.conductor, ROLE))
    with sqlite_stack.db.snapshot() as connection:
        left = connection.execute(select(func.count()).select_from(StepRun)).scalar_one()
    assert left == step_runs.KEPT


def test_the_upkeep_keeps_each_node_s_newest_history(sqlite_stack: Stack) -> None:
    """Ironic's rule: a node's newest entries stay, older ones beyond them go, a batch at once;
    nothing younger than the minimum age goes."""
    ctx = sqlite_stack.conductor.ctx
    ids: list[int] = []
    old = utcnow() - dt.timedelta(days=30)
    with sqlite_stack.db.write() as session:
        for name in ("busy", "quiet"):
            ids.append(
                session.execute(
                    insert(Node)
                    .values(
                        uuid=str(uuid.uuid4()),
                        name=name,
                        driver="fake-hardware",
                        provision_state="enroll",
                        created_at=utcnow(),
                    )
                    .returning(Node.id)
                ).scalar_one()
            )
    busy, quiet = ids
    with sqlite_stack.db.write() as session:
        for node_id, count in ((busy, 12), (quiet, 3)):
            session.execute(
                insert(NodeHistory),
                [
                    {
                        "uuid": str(uuid.uuid4()),
                        "node_id": node_id,
                        "event_type": "test",
                        "event": f"entry {n}",
                        "severity": "INFO",
                        "created_at": old,
                    }
                    for n in range(count)
                ],
            )
    ctx.settings = ctx.settings.model_copy(
        update={"history_max_entries": 5, "history_minimum_days": 60, "history_prune_batch": 4}
    )
    assert housekeeping.prune_history(term_of(sqlite_stack.conductor, ROLE)) == 0, "too young"
    ctx.settings = ctx.settings.model_copy(update={"history_minimum_days": 7})
    term = term_of(sqlite_stack.conductor, ROLE)
    while housekeeping.prune_history(term):
        pass

    def events_of(node_id: int) -> list[str]:
        with sqlite_stack.db.snapshot() as connection:
            return list(
                connection.scalars(
                    select(NodeHistory.event)
                    .where(NodeHistory.node_id == node_id, NodeHistory.event_type == "test")
                    .order_by(NodeHistory.id)
                )
            )

    assert events_of(busy) == [f"entry {n}" for n in range(7, 12)]
    assert events_of(quiet) == ["entry 0", "entry 1", "entry 2"]
