"""Which conductors are alive: the queries every coordination decision reads.

A conductor is alive while it is marked online and its heartbeat is younger
than the dead-after timeout (``conductor.heartbeat_timeout``), measured on
the database's clock so that skew between hosts cannot make one conductor
think another dead. Reservations, the hash ring and the election all read
the same definition here, so they never disagree about who may hold what.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Select, bindparam, or_, select

from metalforge.db.engine import Database
from metalforge.db.models import Conductor

LIVE_CONDUCTORS = select(Conductor.hostname).where(
    Conductor.heartbeat_at >= bindparam("b_cutoff"), Conductor.online.is_(True)
)
"""Hostnames of live conductors; ``b_cutoff`` is ``live_cutoff(db, dead_after)``.

Holders whose reservations stand. Any other holder's is free to take: a dead
conductor's, and a holder that is no conductor at all (the API's short
boot-device reservation, if the API process died during the BMC call). A
bound parameter rather than a value, so the statement compiles once."""

LIVE_CONDUCTOR_ROWS = select(
    Conductor.hostname, Conductor.conductor_group, Conductor.drivers
).where(Conductor.heartbeat_at >= bindparam("b_cutoff"), Conductor.online.is_(True))
"""``(hostname, conductor_group, drivers)`` of the live conductors, for the hash ring;
``b_cutoff`` as for ``LIVE_CONDUCTORS``."""


def live_cutoff(db: Database, dead_after: dt.timedelta) -> dt.datetime:
    """A heartbeat older than this (on the database's clock) is a dead conductor's."""
    return db.now() - dead_after


def dead_conductors(db: Database, dead_after: dt.timedelta) -> Select[str]:
    """Subquery: hostnames of conductors that stopped heartbeating or went offline."""
    return select(Conductor.hostname).where(
        or_(Conductor.heartbeat_at < live_cutoff(db, dead_after), Conductor.online.is_(False))
    )
