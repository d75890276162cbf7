"""The node reservation: a lock taken as a context manager with a purpose.

``with acquire(ctx, node_id, "deploy") as task:`` sets ``nodes.reservation``
to this conductor and bumps the node's epoch (the fencing token). Every later
write is conditional on both, so a conductor that lost its lock (it stalled
and another conductor took the node over) cannot overwrite anything: its next
write raises ``LockLost``. A reservation held by a conductor that stopped
heartbeating (or by a holder that is no live conductor) may be taken at once.

Drivers work on a detached copy of the node; ``save`` writes the columns they
changed, and leaving the block saves and releases.

Every write here is a prebuilt Core statement on the transaction's
connection, not the ORM unit of work: on SQLite the service's write
transactions run one after another, so their length bounds how many nodes
move per second. What changed is found by comparing with a snapshot taken
after each write (JSON columns as canonical JSON bytes, which in-place edits
of a dict cannot reach), not with deep copies.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

import orjson
from sqlalchemy import JSON, Table, and_, bindparam, or_, select, update
from sqlalchemy.orm import Session

from metalforge.conductor import history, transitions
from metalforge.conductor.context import ConductorContext
from metalforge.config import ConductorSettings
from metalforge.db import agent_sessions, flow_progress, step_runs
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import (
    Conductor,
    FlowProgressRow,
    Node,
    NodeHistory,
    node_from_row,
    utcnow,
)
from metalforge.db.tallies import count_on_commit, counted, observed
from metalforge.drivers.base import Interface
from metalforge.errors import NodeLocked
from metalforge.redaction import Scrubber
from metalforge.tallies import STEP_DURATION, TAKEOVERS


class NodeGone(LookupError):
    """The node was deleted."""


class LockLost(RuntimeError):
    """The reservation was taken over; this conductor must stop touching the node."""


class Interrupted(RuntimeError):
    """The conductor is stopping; the work will be resumed from the node's saved progress."""


_NODES = cast(Table, Node.__table__)
_COLUMNS = [c.key for c in _NODES.columns if c.key not in ("id", "reservation", "epoch")]
_JSON_COLUMNS = frozenset(c.key for c in _NODES.columns if isinstance(c.type, JSON))
_DUMP_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS

LIVE_CONDUCTORS = select(Conductor.hostname).where(
    Conductor.heartbeat_at >= bindparam("b_cutoff"), Conductor.online.is_(True)
)
"""Hostnames of live conductors; ``b_cutoff`` is ``live_cutoff(ctx)``.

Holders whose reservations stand. Any other holder's is free to take: a dead
conductor's, and a holder that is no conductor at all (the API's short
boot-device reservation, if the API process died during the BMC call)."""
_PROGRESS = cast(Table, FlowProgressRow.__table__)
_READ = (
    select(_NODES, *flow_progress.JOINED_COLUMNS)
    .select_from(_NODES.outerjoin(_PROGRESS, _PROGRESS.c.node_id == _NODES.c.id))
    .where(_NODES.c.id == bindparam("b_id"))
    .with_for_update(of=_NODES)
)
"""The node and its flow progress, in the one statement the lock runs anyway."""
_TAKE = (
    update(_NODES)
    .where(
        _NODES.c.id == bindparam("b_id"),
        or_(
            _NODES.c.reservation.is_(None),
            _NODES.c.reservation.not_in(LIVE_CONDUCTORS),
        ),
    )
    .values(
        reservation=bindparam("b_host"),
        epoch=_NODES.c.epoch + 1,
        conductor_affinity=bindparam("b_host"),
    )
)
# The SET clause of a save comes from the keys of its parameters.
LOG = logging.getLogger(__name__)
_MESSAGE_COLUMNS = ("last_error", "maintenance_reason")
"""Columns holding messages built from what drivers, BMCs and agents said."""

_HELD_BY_TASK = and_(
    _NODES.c.id == bindparam("b_id"),
    _NODES.c.reservation == bindparam("b_host"),
    _NODES.c.epoch == bindparam("b_epoch"),
)
"""The fencing rule: the node is still this conductor's, at the epoch it took."""
_FENCE = select(_NODES.c.id).where(_HELD_BY_TASK).with_for_update()
_SAVE = update(_NODES).where(_HELD_BY_TASK)


def live_cutoff(ctx: ConductorContext) -> dt.datetime:
    """A heartbeat older than this (on the database's clock) is a dead conductor's."""
    return ctx.db.now() - ctx.dead_after


def dead_conductors(ctx: ConductorContext) -> Any:
    """Subquery: hostnames of conductors that stopped heartbeating or went offline."""
    return select(Conductor.hostname).where(
        or_(Conductor.heartbeat_at < live_cutoff(ctx), Conductor.online.is_(False))
    )


def _frozen(value: Any) -> Any:
    """A JSON column's value as it is now, out of reach of later in-place edits."""
    try:
        return orjson.dumps(value, option=_DUMP_OPTIONS)
    except TypeError:  # not plain JSON (orjson is stricter than the column's json)
        return ("copy", copy.deepcopy(value))


class NodeTask:
    """A node held under this conductor's reservation; implements ``DriverTask``."""

    def __init__(
        self,
        ctx: ConductorContext,
        node: Node,
        purpose: str,
        progress: FlowProgress,
    ) -> None:
        self.ctx = ctx
        self.purpose = purpose
        self._node = node
        self._saved = self._snapshot()
        self._history: list[tuple[str, str, str, float | None]] = []
        self._on_release: list[Callable[[Session], object]] = []
        self._with_transition: list[Callable[[Session], object]] = []
        self._step_runs: list[tuple[str, str, float]] = []
        self._released = False
        self._progress = progress
        self._saved_progress = progress

    @property
    def node(self) -> Node:
        return self._node

    @property
    def progress(self) -> FlowProgress:
        """The node's flow progress, read with the node by ``lock``, written with it."""
        return self._progress

    @progress.setter
    def progress(self, value: FlowProgress) -> None:
        self._progress = value

    def _progress_change(self) -> FlowProgress | None:
        """The progress to write with the next write, if it changed."""
        return None if self._progress == self._saved_progress else self._progress

    @property
    def released(self) -> bool:
        """The reservation was given back when the flow parked the node."""
        return self._released

    @property
    def epoch(self) -> int:
        return self._node.epoch

    def now(self) -> float:
        """Seconds since the epoch on the database's clock (see ``db.clock``)."""
        return self.ctx.db.now().timestamp()

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.ctx.stopping.wait(seconds):
            raise Interrupted(f"conductor stopping during {self.purpose}")

    def record(
        self,
        event_type: str,
        event: str,
        severity: str = history.INFO,
        duration: float | None = None,
    ) -> None:
        self._history.append((event_type, event, severity, duration))

    def record_step_run(self, interface: str, step: str, seconds: float) -> None:
        """A step finished well in ``seconds``: kept for estimates and counted for metrics,
        with the node's next write."""
        self._step_runs.append((interface, step, seconds))

    def _write_step_runs(self, session: Session) -> None:
        runs, self._step_runs = self._step_runs, []
        step_runs.record(session.connection(), self._node.driver, runs)
        for interface, step, seconds in runs:
            count_on_commit(session, observed(STEP_DURATION, (interface, step), seconds))

    @property
    def settings(self) -> ConductorSettings:
        return self.ctx.settings

    def interface(self, family: str) -> Interface:
        return self.ctx.drivers.interface(self._node, family)

    def agent_session(self) -> agent_sessions.AgentSessionInfo | None:
        with self.ctx.db.read() as session:
            return agent_sessions.get(session, self._node.id)

    def begin_agent_session(self) -> None:
        # Written at once, not with the node: the agent may look up before the
        # node's next save, and must then find the new session.
        with self.ctx.db.write() as session:
            self._fence(session)
            agent_sessions.begin(session, self._node.id)

    def end_agent_session(self) -> None:
        with self.ctx.db.write() as session:
            self._fence(session)
            agent_sessions.end(session, self._node.id)

    def _fence(self, session: Session) -> None:
        """Hold the node's row until the transaction ends, if this task still owns it.

        Agent-session writes are fenced like node writes: a conductor that
        lost the node (taken over while it stalled) must not void the token
        the new owner's agent holds. The row lock keeps a takeover from
        slipping in between this check and the write.
        """
        held = (
            session.connection()
            .execute(
                _FENCE,
                {"b_id": self._node.id, "b_host": self.ctx.hostname, "b_epoch": self._node.epoch},
            )
            .first()
        )
        if held is None:
            raise LockLost(f"lost the reservation of node {self._node.uuid}")

    def write_fenced(self, func: Callable[[Session], object]) -> None:
        """Write what ``func`` writes now, with the node's unsaved changes, if this task
        still holds the node (``LockLost`` otherwise): a step of a flow that others
        must see before the flow goes on (an inspection that began processing)."""
        changes, entries, _, progress = self._pending()
        with self.ctx.db.write() as session:
            self._fence(session)
            self._flush(session, changes, entries, progress)
            func(session)
        self._remember()

    def on_release(self, func: Callable[[Session], object]) -> None:
        """Run ``func`` in the transaction that releases the reservation."""
        self._on_release.append(func)

    def clear_release_hooks(self) -> None:
        self._on_release.clear()

    def _snapshot(self) -> dict[str, Any]:
        # The node holds every column in its __dict__ (it is built from a full
        # row), and reading it there skips the ORM's attribute machinery.
        values = self._node.__dict__
        return {
            key: _frozen(value) if key in _JSON_COLUMNS else value
            for key in _COLUMNS
            for value in (values[key],)
        }

    def _changes(self) -> dict[str, Any]:
        values = self._node.__dict__
        changed: dict[str, Any] = {}
        for key, saved in self._saved.items():
            value = values[key]
            if (_frozen(value) if key in _JSON_COLUMNS else value) != saved:
                changed[key] = value
        return changed

    def _take_history(self) -> list[dict[str, Any]]:
        """The recorded events as history rows, stamped with the node's state now."""
        node = self._node
        entries = [
            history.entry(
                node.id,
                event_type,
                event,
                severity=severity,
                conductor=self.ctx.hostname,
                state=node.provision_state,
                target=node.target_provision_state,
                duration=duration,
            )
            for event_type, event, severity, duration in self._history
        ]
        self._history.clear()
        return entries

    def _pending(
        self, note: str | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]], str | None, FlowProgress | None]:
        """What the next write carries: changed columns, history rows and flow progress.

        Worked out before the write transaction begins: on SQLite it holds the
        service's only write lock, so everything done inside it is done while
        every other writer waits.
        """
        if self._released:
            raise LockLost(f"node {self._node.uuid} was already released by {self.purpose}")
        changes, entries = self._changes(), self._take_history()
        progress = self._progress_change()
        if progress is not None:
            # The progress is written with a fenced update of the node: it
            # moves only while this task holds the node (and updated_at shows it).
            changes.setdefault("updated_at", utcnow())
        node = self._node
        scrub = Scrubber(node.driver_info, node.instance_info, node.driver_internal_info)
        for key in _MESSAGE_COLUMNS:
            if isinstance(changes.get(key), str):
                changes[key] = scrub(changes[key])
        if changes.get("last_error"):
            changes["last_error"] = self._with_requester(changes["last_error"])
        for entry in entries:
            entry["event"] = scrub(entry["event"])
        return changes, entries, scrub(note) if note else note, progress

    def _with_requester(self, message: str) -> str:
        """A failure names who asked for the operation that failed, and is logged so.

        The requester is the user of the node's latest history entry written
        for a request: read only when a failure is recorded, never on the
        way to success. Without authentication (``noauth``) history names
        nobody, and neither does the failure.
        """
        with self.ctx.db.read() as session:
            requester = session.scalar(
                select(NodeHistory.user)
                .where(NodeHistory.node_id == self._node.id, NodeHistory.user.is_not(None))
                .order_by(NodeHistory.id.desc())
                .limit(1)
            )
        LOG.warning(
            "node %s: %s (requested by %s)", self._node.uuid, message, requester or "nobody"
        )
        if requester is None or "(requested by " in message:
            return message
        return f"{message} (requested by {requester})"

    def _flush(
        self,
        session: Session,
        changes: dict[str, Any],
        entries: list[dict[str, Any]],
        progress: FlowProgress | None,
    ) -> None:
        if changes:
            changes.setdefault("updated_at", utcnow())
            result = session.connection().execute(
                _SAVE,
                {
                    **changes,
                    "b_id": self._node.id,
                    "b_host": self.ctx.hostname,
                    "b_epoch": self._node.epoch,
                },
            )
            if result.rowcount != 1:
                raise LockLost(f"lost the reservation of node {self._node.uuid}")
        if progress is not None:
            flow_progress.write(session.connection(), self._node.id, progress)
        history.write(session, entries)
        self._write_step_runs(session)

    def _remember(self) -> None:
        self._saved = self._snapshot()
        self._saved_progress = self._progress

    def save(self) -> None:
        """Write what changed on the node (fenced)."""
        changes, entries, _, progress = self._pending()
        with self.ctx.db.write() as session:
            self._flush(session, changes, entries, progress)
        self._remember()

    def with_next_transition(self, func: Callable[[Session], object]) -> None:
        """Run ``func`` in the transaction of the next ``transition`` (a write that
        must happen with it or not at all)."""
        self._with_transition.append(func)

    def transition(
        self, event: str, *, note: str | None = None, severity: str = history.INFO, **changes: Any
    ) -> None:
        """Move the node through ``event`` with ``changes`` and what else changed, in one write.

        One fenced statement writes the unsaved changes, the new state and, when
        the flow parks the node (a stable, failure, wait or hold state), the
        release of the reservation, so nobody sees the new state while it is
        still locked; the release hooks run in the same transaction, and so do
        those given to ``with_next_transition``.
        """
        for key, value in changes.items():
            setattr(self._node, key, value)
        dirty, entries, note, progress = self._pending(note)
        with self.ctx.db.write() as session:
            try:
                moved = transitions.apply(
                    session,
                    self._node,
                    event,
                    holder=self.ctx.hostname,
                    changes=dirty,
                    conductor=self.ctx.hostname,
                    note=note,
                    severity=severity,
                    release=True,
                    earlier_history=entries,
                )
            except transitions.TransitionConflict as exc:
                raise LockLost(str(exc)) from exc
            if progress is not None:
                flow_progress.write(session.connection(), self._node.id, progress)
            self._write_step_runs(session)
            for func in self._with_transition:
                func(session)
            self._with_transition.clear()
            if moved.released:
                self._run_release_hooks(session)
        self._remember()

    def _run_release_hooks(self, session: Session) -> None:
        for func in self._on_release:
            func(session)
        self._on_release.clear()
        self._released = True

    def release(self) -> None:
        if self._released:
            if self._changes() or self._history or self._progress_change():
                raise LockLost(f"node {self._node.uuid} was changed after its release")
            return
        changes, entries, _, progress = self._pending()
        with self.ctx.db.write() as session:
            self._flush(session, {**changes, "reservation": None}, entries, progress)
            self._run_release_hooks(session)
        self._remember()


def lock(ctx: ConductorContext, session: Session, node_id: int) -> dict[str, Any]:
    """Take node ``node_id``'s reservation in the caller's transaction.

    Returns the node's columns as they are now, and its flow progress's
    (``flow_progress.JOINED_COLUMNS``), for ``acquire``, which builds the
    node outside the transaction. Raises ``NodeGone`` or ``NodeLocked``,
    having written nothing.
    """
    connection = session.connection()
    # Read under the row lock the update takes anyway, so the takeover note names
    # the real holder and the node needs no second read.
    row = connection.execute(_READ, {"b_id": node_id}).one_or_none()
    if row is None:
        raise NodeGone(str(node_id))
    result = connection.execute(
        _TAKE, {"b_id": node_id, "b_host": ctx.hostname, "b_cutoff": live_cutoff(ctx)}
    )
    if result.rowcount != 1:
        raise NodeLocked(row.uuid, row.reservation)
    values = dict(row._mapping)
    values.update(reservation=ctx.hostname, epoch=row.epoch + 1, conductor_affinity=ctx.hostname)
    previous = row.reservation
    if previous is not None and previous != ctx.hostname:
        # Only a dead conductor's reservation can be taken; without this note the
        # history would show the flow jump from one conductor to another unexplained.
        history.record(
            session,
            node_id,
            "takeover",
            f"conductor {ctx.hostname} took the node over from conductor {previous}, "
            "which stopped heartbeating or went offline",
            severity=history.WARNING,
            conductor=ctx.hostname,
            state=row.provision_state,
            target=row.target_provision_state,
        )
        count_on_commit(session, counted(TAKEOVERS, (row.conductor_group or "",)))
    return values


@contextmanager
def acquire(
    ctx: ConductorContext,
    node_id: int,
    purpose: str,
    *,
    locked: Mapping[str, Any] | None = None,
) -> Iterator[NodeTask]:
    """Hold node ``node_id`` under this conductor's reservation for ``purpose``.

    ``locked`` is what ``lock`` returned in a transaction that has committed
    (the dispatcher locks nodes while claiming their work).
    """
    if locked is None:
        with ctx.db.write() as session:
            locked = lock(ctx, session, node_id)
    try:
        columns = dict(locked)
        progress = flow_progress.from_joined(columns)
        task = NodeTask(ctx, node_from_row(columns), purpose, progress)
    except Exception:
        # The reservation is taken but no task holds it yet: a stored value this
        # code cannot read must not keep the node reserved by a live conductor.
        ctx.leaked_reservations.add((node_id, int(locked["epoch"])))
        drop_leaked_reservations(ctx)
        raise
    try:
        yield task
    except LockLost:
        raise
    except BaseException:
        task.clear_release_hooks()
        _release_quietly(task)
        raise
    try:
        task.release()
    except LockLost:
        raise
    except Exception:
        # Writing what the work changed failed: give the node back without it.
        _give_back_bare(task)
        raise


def _release_quietly(task: NodeTask) -> None:
    """Release after a failure; if even that fails, give the reservation back bare.

    The release writes the task's unsaved changes, which may be what failed
    (a value the database refuses). The reservation must not outlive the
    failure whatever it was: this conductor stays alive, so nobody else
    would ever take the node.
    """
    try:
        task.release()
    except LockLost:
        pass
    except Exception:
        LOG.exception("node %s: releasing after a failure failed", task.node.uuid)
        _give_back_bare(task)


def _give_back_bare(task: NodeTask) -> None:
    task.ctx.leaked_reservations.add((task.node.id, task.epoch))
    drop_leaked_reservations(task.ctx)


_DROP = update(_NODES).where(_HELD_BY_TASK).values(reservation=None)


def unlock(ctx: ConductorContext, session: Session, node_id: int, epoch: int) -> None:
    """Drop the reservation ``lock`` took at ``epoch``, changing nothing else on the node
    (nothing, if the node moved on since)."""
    session.connection().execute(_DROP, {"b_id": node_id, "b_host": ctx.hostname, "b_epoch": epoch})


_NOTE = (
    update(_NODES)
    .where(_NODES.c.id == bindparam("b_id"), _NODES.c.reservation.is_(None))
    .values(last_error=bindparam("b_error"))
)


def note_unheld_failure(session: Session, node_id: int, message: str) -> None:
    """Say on an unreserved node why work on it was given up, when no task could hold it.

    Only a node nobody holds is written (a holder's own outcome wins), and the
    history keeps the message whatever happened to ``last_error``.
    """
    session.connection().execute(_NOTE, {"b_id": node_id, "b_error": message})
    history.record(session, node_id, "conductor", message, severity=history.ERROR)


def drop_leaked_reservations(ctx: ConductorContext) -> int:
    """Give back reservations a failed release left; returns how many are still owed.

    Fenced by the epoch the task held, so a reservation taken since (by this
    conductor for other work) is left alone. Called again by the heartbeat
    while the database refuses.
    """
    for node_id, epoch in sorted(ctx.leaked_reservations):
        try:
            with ctx.db.write() as session:
                unlock(ctx, session, node_id, epoch)
        except Exception:
            LOG.exception("could not give back the reservation of node id %s yet", node_id)
            continue
        ctx.leaked_reservations.discard((node_id, epoch))
    return len(ctx.leaked_reservations)
