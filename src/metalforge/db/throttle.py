"""Cluster-wide rate limits: every process takes its turn from one row.

``next_slot`` hands out the next moment a caller may act and moves the row
one interval on, in the caller's short write transaction (the row is locked
for that statement's transaction only). The caller then waits for its slot
outside any transaction; however many workers on however many hosts ask,
they act at most once per interval. A caller that gives up its slot (the
process stops while waiting) only makes the rate lower.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from metalforge.db.engine import now_for
from metalforge.db.models import Throttle

POWER_ON = "power-on"
"""Powering nodes on into the inspection ramdisk."""


def next_slot(session: Session, name: str, interval: float) -> dt.datetime:
    """The moment the caller may act (on the database's clock); the row moves on."""
    now = now_for(session)
    # The first caller ever creates the row; two first callers at once must not
    # both fail, so the insert gives way to the other's.
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(
        dialect.insert(Throttle)
        .values(name=name, next_at=now)
        .on_conflict_do_nothing(index_elements=[Throttle.name])
    )
    row = session.scalars(select(Throttle).where(Throttle.name == name).with_for_update()).one()
    session.refresh(row)
    slot = max(row.next_at, now)
    row.next_at = slot + dt.timedelta(seconds=interval)
    session.flush()
    return slot
