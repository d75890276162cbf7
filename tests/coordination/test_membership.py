"""Who is alive: online with a heartbeat younger than the dead-after timeout, and nobody else.

Reservations, the hash ring and the election all read these queries, so a
conductor one of them counts as dead is dead for all of them.
"""

from __future__ import annotations

import datetime as dt

from metalforge.coordination.membership import (
    LIVE_CONDUCTOR_ROWS,
    LIVE_CONDUCTORS,
    dead_conductors,
    live_cutoff,
)
from metalforge.db.engine import Database
from metalforge.db.models import Conductor

DEAD_AFTER = dt.timedelta(seconds=30)


def _enrol(db: Database) -> None:
    now = db.now()
    with db.write() as session:
        session.add_all(
            [
                Conductor(hostname="fresh", drivers=["fake-hardware"], heartbeat_at=now),
                Conductor(hostname="stale", heartbeat_at=now - 2 * DEAD_AFTER),
                Conductor(hostname="offline", heartbeat_at=now, online=False),
            ]
        )


def test_only_an_online_conductor_with_a_recent_heartbeat_is_live(db: Database) -> None:
    _enrol(db)
    cutoff = live_cutoff(db, DEAD_AFTER)
    with db.read() as session:
        live = set(session.scalars(LIVE_CONDUCTORS, {"b_cutoff": cutoff}))
        rows = session.execute(LIVE_CONDUCTOR_ROWS, {"b_cutoff": cutoff}).all()
        dead = set(session.scalars(dead_conductors(db, DEAD_AFTER)))
    assert live == {"fresh"}
    assert [tuple(row) for row in rows] == [("fresh", "", ["fake-hardware"])]
    assert dead == {"stale", "offline"}
