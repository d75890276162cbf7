"""Power state sync: find nodes whose hardware no longer has the power state metalforge recorded.

Someone pressed the power button, a BMC rebooted the host, a PDU failed: the
recorded ``power_state`` drifts from the truth. Every interval each
conductor checks the idle nodes the hash ring gives it, in three steps:

1. One read picks the candidates: not reserved, not in maintenance, no power
   change pending, resting in a stable or failure state (a flow would make
   its own power changes meanwhile), and not ``enroll`` (credentials not
   verified yet, so every read would fail). It reads only what the hash
   ring needs; the conductor's own share is then read whole, a chunk at a
   time, and each chunk goes through the next two steps before the next is
   read, so a conductor's memory does not grow with the fleet.
2. Their power interfaces are read in parallel on a bounded pool, with no
   database transaction open: a BMC may take seconds to answer, and on
   SQLite a write transaction held that long would stop every writer. Each
   node's read has a whole deadline (``sync_power_read_deadline``): a BMC
   that never answers is cut off there, its read fails this round (and
   counts towards its breaker, which then skips it at once), and the other
   nodes are read meanwhile.
3. Only nodes needing a write are reserved, without waiting: a node someone
   reserved meanwhile is skipped (it is being worked on, and its next sync
   looks again). Under the reservation, the node must still be as it was
   read (same epoch plus this lock, nothing pending); then the drift is
   recorded in the node's history and either the recorded state follows the
   hardware (default) or, with ``force``, the hardware is set back to the
   recorded state (Ironic's ``force_power_state_during_sync``).

A BMC that cannot be read is recorded in history once per distinct error
(the message is kept in ``driver_internal_info``), not every interval, and a
node that becomes readable again says so once. Nothing here raises for one
node's trouble: the periodic loop must keep going.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

from sqlalchemy import ColumnElement, Table, select

from metalforge import outbound_http, states
from metalforge.conductor import history
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.reservations import acquire
from metalforge.conductor.task import Interrupted, LockLost, NodeGone, NodeTask
from metalforge.coordination.hashring import ConductorDirectory, HashRing
from metalforge.db.models import Node, node_from_row
from metalforge.drivers.base import (
    DriverError,
    ManagementInterface,
    PowerInterface,
    ReadOnlyTask,
    switch_power,
)
from metalforge.errors import NodeLocked

LOG = logging.getLogger(__name__)

SYNCED_STATES = (states.STABLE_STATES | states.FAILURE_STATES) - {states.ENROLL}
"""Provision states whose nodes are synced: nobody is changing their power meanwhile."""
ERROR_KEY = "power_sync_error"
"""``driver_internal_info`` key holding the last read error, so it is recorded once."""
EVENT_TYPE = "power_sync"
READ_DEADLINE = "conductor.sync_power_read_deadline"
DEFAULT_WORKERS = 8
"""Power reads at once: enough to hide BMC latency, few enough not to swamp a BMC network."""

_NODES = cast(Table, Node.__table__)
_ROWS_PER_READ = 500
"""Whole node rows read per statement (bound parameters stay well under every limit)."""


@dataclass
class SyncReport:
    """What one sync did, for logs and tests."""

    checked: int = 0
    """Nodes whose power state was read (successfully or not)."""
    drifted: int = 0
    """Nodes whose hardware disagreed with the recorded state."""
    corrected: int = 0
    """Drifts resolved: the recorded state updated, or (``force``) the hardware set back."""
    failed: int = 0
    """Reads that failed, and forced power changes that failed."""
    skipped: int = 0
    """Nodes that needed a write but were reserved or changed meanwhile."""

    def add(self, other: SyncReport) -> None:
        self.checked += other.checked
        self.drifted += other.drifted
        self.corrected += other.corrected
        self.failed += other.failed
        self.skipped += other.skipped

    def __str__(self) -> str:
        return (
            f"checked {self.checked}, drifted {self.drifted}, corrected {self.corrected}, "
            f"failed {self.failed}, skipped {self.skipped}"
        )


@dataclass(frozen=True)
class _Reading:
    """One node as read without a lock, and what its hardware said."""

    node: Node
    actual: str | None = None
    error: str | None = None
    health: str | None = None
    """What the BMC rates the hardware's health, if it says (``health_read``)."""
    health_read: bool = False

    @property
    def recorded(self) -> str | None:
        return self.node.power_state

    @property
    def health_changed(self) -> bool:
        return self.health_read and self.health != self.node.health

    @property
    def needs_write(self) -> bool:
        known_error = self.node.driver_internal_info.get(ERROR_KEY)
        if self.error is not None:
            return self.error != known_error
        drifted = self.actual != self.recorded or known_error is not None
        return drifted or self.health_changed


class _ReadTask(ReadOnlyTask):
    """A read-only task whose waits end when the conductor stops."""

    def __init__(self, ctx: ConductorContext, node: Node) -> None:
        super().__init__(node)
        self._ctx = ctx

    def sleep(self, seconds: float) -> None:
        if seconds > 0 and self._ctx.stopping.wait(seconds):
            raise Interrupted("conductor stopping during power state sync")


def _where(ctx: ConductorContext) -> tuple[ColumnElement[bool], ...]:
    """What makes a node a candidate: idle, managed, of a hardware type this process runs."""
    return (
        _NODES.c.reservation.is_(None),
        _NODES.c.maintenance.is_(False),
        _NODES.c.target_power_state.is_(None),
        _NODES.c.provision_state.in_(sorted(SYNCED_STATES)),
        _NODES.c.driver.in_(sorted(ctx.drivers.types)),
    )


def _candidates(ctx: ConductorContext, directory: ConductorDirectory) -> list[int]:
    """The ids of the nodes this conductor should check now.

    Only the four columns the hash ring needs are read for every candidate;
    ``_chunks`` reads whole rows for this conductor's share alone, a chunk at
    a time. Each conductor of a 100,000-node fleet would otherwise decode and
    hold every node's 70 columns every interval, two thirds of them to throw
    away.
    """
    keys = select(_NODES.c.id, _NODES.c.uuid, _NODES.c.driver, _NODES.c.conductor_group)
    rings: dict[tuple[str, str], HashRing] = {}
    mine: list[int] = []
    with ctx.db.read() as session:
        for row in session.connection().execute(keys.where(*_where(ctx))):
            key = (row.driver, row.conductor_group)
            ring = rings.get(key) or rings.setdefault(key, directory.ring(*key))
            if ring.owner(row.uuid) == ctx.hostname:
                mine.append(row.id)
    return mine


def _chunks(ctx: ConductorContext, ids: list[int]) -> Iterator[list[Node]]:
    """The nodes of ``ids``, ``_ROWS_PER_READ`` at a time, as detached copies.

    The conditions are applied again: a node that stopped being a candidate
    since its id was read is left out.
    """
    for start in range(0, len(ids), _ROWS_PER_READ):
        chunk = ids[start : start + _ROWS_PER_READ]
        query = select(_NODES).where(_NODES.c.id.in_(chunk), *_where(ctx))
        with ctx.db.read() as session:
            rows = [dict(row._mapping) for row in session.connection().execute(query)]
        yield [node_from_row(row) for row in rows]


def _power(ctx: ConductorContext, node: Node) -> PowerInterface:
    return ctx.drivers.interface_of(node, PowerInterface, "read power states")


def _health(ctx: ConductorContext, node: Node, task: _ReadTask) -> tuple[str | None, bool]:
    """The BMC's health rating and whether it could be read; a failure here is not the
    power read's (the rating simply stays as recorded)."""
    iface = ctx.drivers.optional_interface_of(node, ManagementInterface)
    if iface is None:
        return None, False
    try:
        return iface.get_health(task), True
    except (DriverError, LookupError) as exc:
        LOG.debug("node %s: health not read: %s", node.uuid, exc)
        return None, False


def _read(ctx: ConductorContext, node: Node) -> _Reading:
    """What ``node``'s BMC says, within ``sync_power_read_deadline`` (its calls are cut
    then, and the node's read fails this round: one BMC that never answers must not hold
    the sync's workers from the rest of the conductor's share)."""
    try:
        task = _ReadTask(ctx, node)
        with outbound_http.within(ctx.settings.sync_power_read_deadline, READ_DEADLINE):
            actual = _power(ctx, node).get_power_state(task)
            health, health_read = _health(ctx, node, task)
        return _Reading(node, actual=actual, health=health, health_read=health_read)
    except (DriverError, LookupError) as exc:
        return _Reading(node, error=str(exc))
    except Interrupted:
        raise
    except Exception as exc:  # a driver's bug fails this node's read only
        LOG.exception("reading the power state of node %s failed unexpectedly", node.uuid)
        return _Reading(node, error=f"unexpected {type(exc).__name__}: {exc}")


def _still_as_read(task: NodeTask, reading: _Reading) -> bool:
    """Nobody reserved the node between the read and this lock, and it still qualifies."""
    node = task.node
    return (
        node.epoch == reading.node.epoch + 1
        and not node.maintenance
        and node.target_power_state is None
        and node.provision_state in SYNCED_STATES
    )


def _act(ctx: ConductorContext, reading: _Reading, force: bool) -> SyncReport:
    """Record what the reading showed, under the node's reservation (skipped if taken)."""
    report = SyncReport()
    try:
        with acquire(ctx, reading.node.id, "power state sync") as task:
            if not _still_as_read(task, reading):
                report.skipped += 1
            elif reading.error is not None:
                _record_error(task, reading.error)
            else:
                _resolve(task, reading, force, report)
    except (NodeLocked, NodeGone, LockLost):
        report.skipped += 1
    return report


def _record_error(task: NodeTask, message: str) -> None:
    task.node.driver_internal_info = {**task.node.driver_internal_info, ERROR_KEY: message}
    task.record(EVENT_TYPE, f"cannot read the power state: {message}", history.WARNING)


def _resolve(task: NodeTask, reading: _Reading, force: bool, report: SyncReport) -> None:
    node = task.node
    info = dict(node.driver_internal_info)
    if info.pop(ERROR_KEY, None) is not None:
        node.driver_internal_info = info
        task.record(EVENT_TYPE, "the power state can be read again")
    if reading.health_changed:
        before = node.health
        node.health = reading.health
        task.record(
            "monitoring",
            f"health {reading.health or 'not reported'} (was {before or 'not reported'})",
            history.INFO if reading.health in (None, "OK") else history.WARNING,
        )
    actual, recorded = reading.actual, node.power_state
    if actual == recorded:
        return
    report.drifted += 1
    drift = f"recorded power state {recorded or 'unknown'}, the hardware reports {actual}"
    if not force or recorded is None:
        node.power_state = actual
        task.record(EVENT_TYPE, f"{drift}; recorded state updated", history.WARNING)
        report.corrected += 1
        return
    try:
        switch_power(task, _power(task.ctx, node), recorded)
    except DriverError as exc:
        task.record(
            EVENT_TYPE, f"{drift}; could not switch it back to {recorded}: {exc}", history.ERROR
        )
        report.failed += 1
        return
    task.record(EVENT_TYPE, f"{drift}; switched it back to {recorded} (forced)", history.WARNING)
    report.corrected += 1


def sync_power_states(
    ctx: ConductorContext,
    *,
    force: bool = False,
    workers: int = DEFAULT_WORKERS,
    directory: ConductorDirectory | None = None,
) -> SyncReport:
    """Check the power state of this conductor's idle nodes; see the module docstring.

    ``directory`` is the conductor's view of its live peers (one is read
    now when none is given). Returns early, with what was done, when the
    conductor starts stopping.
    """
    report = SyncReport()
    # A directory of its own is read once, when the first ring is asked for.
    peers = directory or ConductorDirectory(ctx.db, ctx.settings.heartbeat_timeout, ttl=3600)
    ids = _candidates(ctx, peers)
    if not ids:
        return report
    with ThreadPoolExecutor(min(workers, len(ids)), thread_name_prefix="power-sync") as pool:
        for nodes in _chunks(ctx, ids):
            if ctx.stopping.is_set():
                return report
            try:
                readings = list(pool.map(lambda node: _read(ctx, node), nodes))
            except Interrupted:
                return report
            report.checked += len(readings)
            report.failed += sum(1 for r in readings if r.error is not None)
            todo = [r for r in readings if r.needs_write]
            for future in [pool.submit(_act, ctx, r, force) for r in todo]:
                try:
                    report.add(future.result())
                except Interrupted:
                    pass
                except Exception:  # one node's failure must not stop the others
                    LOG.exception("power state sync of a node failed unexpectedly")
    if report.drifted or report.failed or report.skipped:
        LOG.info("power state sync: %s", report)
    return report
