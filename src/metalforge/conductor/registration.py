"""A conductor's row in the ``conductors`` table: registering, heartbeating, going offline.

Each run of a conductor registers a run id of its own. A second process
started under a hostname another one runs under is refused
(``HostnameInUse``): both would drop each other's reservations and claims.
A run whose heartbeat finds the row no longer names its run id lost the
hostname to a newer registration and must stop.
"""

from __future__ import annotations

import datetime as dt
import time

from sqlalchemy import select, update

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.flows import catalog
from metalforge.conductor.reservations import drop_leaked_reservations
from metalforge.db import queue
from metalforge.db.models import Conductor, Node, WorkItem, utcnow


class HostnameInUse(RuntimeError):
    """Another running conductor has this conductor's hostname."""


def _name_in_use(ctx: ConductorContext) -> bool:
    """Whether another running process heartbeats under this conductor's hostname.

    A fresh heartbeat alone does not tell: a previous run that crashed a
    moment ago left one. A running process writes the next one within
    ``heartbeat_interval``, so watch for one a little longer than that.
    """

    def beat() -> tuple[str | None, dt.datetime | None]:
        with ctx.db.read() as session:
            row = session.execute(
                select(Conductor.run_id, Conductor.heartbeat_at).where(
                    Conductor.hostname == ctx.hostname, Conductor.online.is_(True)
                )
            ).first()
        return (row.run_id, row.heartbeat_at) if row is not None else (None, None)

    first = beat()
    if first[1] is None or ctx.db.now() - first[1] > ctx.dead_after:
        return False
    deadline = time.monotonic() + 2 * ctx.settings.heartbeat_interval + 1.0
    while time.monotonic() < deadline:
        time.sleep(min(0.2, ctx.settings.heartbeat_interval / 4))
        if beat() != first:
            return True
    return False


def register(ctx: ConductorContext, run_id: str) -> None:
    """Upsert this conductor's row and drop reservations a previous run of it left.

    Refuses (``HostnameInUse``) while another process runs under the same
    hostname.
    """
    if _name_in_use(ctx):
        raise HostnameInUse(
            f"another conductor is running with hostname {ctx.hostname!r}; give "
            "each conductor its own conductor.hostname"
        )
    drivers = sorted(ctx.drivers.types)
    with ctx.db.write() as session:
        row = session.scalar(select(Conductor).where(Conductor.hostname == ctx.hostname))
        if row is None:
            row = Conductor(hostname=ctx.hostname)
            session.add(row)
        row.drivers = drivers
        row.conductor_group = ctx.settings.conductor_group
        row.online = True
        row.heartbeat_at = ctx.db.now()
        row.run_id = run_id
        session.execute(
            update(Node).where(Node.reservation == ctx.hostname).values(reservation=None)
        )
        session.execute(
            update(WorkItem)
            .where(WorkItem.state == queue.CLAIMED, WorkItem.lease_owner == ctx.hostname)
            # The previous run died holding them: a failed attempt each, so an
            # item that kills the process is dead-lettered, not run for ever.
            .values(
                state=queue.PENDING,
                lease_owner=None,
                not_before=utcnow(),
                failures=WorkItem.failures + 1,
            )
        )

    # What this conductor was working on without a node (allocations) when it
    # stopped: their items were handed back above; queue those that have none.
    for flow in catalog.DETACHED.values():
        flow.resume(ctx)


def heartbeat(ctx: ConductorContext, run_id: str, running: list[int], lease: dt.timedelta) -> bool:
    """Say this conductor is alive and renew the leases of the items it runs; ``False``
    when the row names another run (this process lost its hostname)."""
    with ctx.db.write() as session:
        result = session.execute(
            update(Conductor)
            .where(Conductor.hostname == ctx.hostname, Conductor.run_id == run_id)
            .values(heartbeat_at=ctx.db.now(), online=True)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            return False
        queue.renew(session, ctx.hostname, lease, running)
    ctx.beats.beat(ctx.settings.heartbeat_interval, ctx.settings.heartbeat_timeout)
    if ctx.leaked_reservations:
        drop_leaked_reservations(ctx)
    return True


def go_offline(ctx: ConductorContext, run_id: str) -> None:
    """Mark this run's row offline, so others take its nodes over at once."""
    with ctx.db.write() as session:
        session.execute(
            update(Conductor)
            .where(Conductor.hostname == ctx.hostname, Conductor.run_id == run_id)
            .values(online=False, updated_at=utcnow())
        )
