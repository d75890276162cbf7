"""Wake-ups after commits that may change the filter, on each engine."""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, select, update

from metalforge import inspection_states as ins
from metalforge.db import agent_sessions
from metalforge.db.changes import ChangeFeed, changes_filter
from metalforge.db.engine import Database
from metalforge.db.models import Introspection, Node, Port
from tests.pxe_filter.conftest import add_node, boot_ramdisk, end_ramdisk, mac, set_inspection

WAIT = 10.0


class Wakes:
    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.set()

    def seen(self, timeout: float = WAIT) -> bool:
        found = self.event.wait(timeout)
        self.event.clear()
        return found


@pytest.fixture
def feed(db: Database) -> Iterator[tuple[ChangeFeed, Wakes]]:
    wakes = Wakes()
    running = ChangeFeed(db, wakes)
    running.start()
    if running.listening is not None:
        assert running.listening.wait(WAIT)
    wakes.seen(0.5)  # the listener's wake-up at (re)connection
    yield running, wakes
    running.stop()


def test_the_watched_statements() -> None:
    assert changes_filter("INSERT INTO ports (uuid, address) VALUES (?, ?)")
    assert changes_filter("UPDATE introspections SET state=? WHERE node_uuid = ?")
    assert changes_filter("DELETE FROM nodes WHERE nodes.id = ?")
    assert not changes_filter("UPDATE nodes SET power_state=? WHERE nodes.id = ?")
    assert not changes_filter("SELECT ports.address FROM ports")
    assert not changes_filter("UPDATE portgroups SET extra=?")
    assert changes_filter("INSERT INTO agent_sessions (node_id, booted_at) VALUES (?, ?)")
    assert changes_filter("UPDATE agent_sessions SET token=?, booted_at=? WHERE node_id = ?")
    assert not changes_filter(
        "UPDATE agent_sessions SET last_heartbeat_at=? WHERE node_id = ? AND booted_at IS NOT NULL"
    )


def test_inspection_and_port_changes_wake_after_commit(
    db: Database, feed: tuple[ChangeFeed, Wakes]
) -> None:
    _feed, wakes = feed
    uuid = add_node(db, mac(1))
    assert wakes.seen()
    set_inspection(db, uuid, ins.WAITING)
    assert wakes.seen()
    with db.write() as session:
        session.execute(update(Port).where(Port.address == mac(1)).values(address=mac(2)))
    assert wakes.seen()
    with db.write() as session:
        session.execute(delete(Node).where(Node.uuid == uuid))
    assert wakes.seen()


def test_other_writes_and_rolled_back_ones_do_not_wake(
    db: Database, feed: tuple[ChangeFeed, Wakes]
) -> None:
    _feed, wakes = feed
    uuid = add_node(db, mac(1))
    assert wakes.seen()
    with db.write() as session:
        session.execute(update(Node).where(Node.uuid == uuid).values(power_state="power on"))
    with pytest.raises(RuntimeError):
        _write_then_fail(db)
    # A later commit of something else must not carry the rolled-back write's mark.
    with db.write() as session:
        session.execute(update(Node).where(Node.uuid == uuid).values(power_state="power off"))
    assert not wakes.seen(1.0)


def _write_then_fail(db: Database) -> None:
    with db.write() as session:
        session.add(Introspection(node_uuid=str(uuidlib.uuid4()), state=ins.WAITING))
        session.flush()
        raise RuntimeError("rolled back")


def test_a_ramdisk_boot_beginning_or_ending_wakes_and_a_heartbeat_does_not(
    db: Database, feed: tuple[ChangeFeed, Wakes]
) -> None:
    _feed, wakes = feed
    uuid = add_node(db, mac(1))
    assert wakes.seen()
    boot_ramdisk(db, uuid, "clean wait")
    assert wakes.seen()
    with db.write() as session:
        node_id = session.scalar(select(Node.id).where(Node.uuid == uuid))
        assert node_id is not None
        token = agent_sessions.issue_token(session, node_id)
    assert token is not None
    beat = agent_sessions.Heartbeat("http://10.0.0.5:9999", "10.0", None, None, None)
    with db.write() as session:
        agent_sessions.record_heartbeat(session, node_id, token, beat)
    assert not wakes.seen(1.0)
    end_ramdisk(db, uuid, "available")
    assert wakes.seen()
