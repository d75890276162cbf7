"""A node held under this conductor's reservation: what a flow reads and writes.

``reservations.acquire`` takes the reservation and hands out a ``NodeTask``;
the reservation sets ``nodes.reservation`` to this conductor and bumps the
node's epoch (the fencing token). Every write here is conditional on both
(the fence in ``node_writes``, which also prepares what each write stores),
so a conductor that lost its lock (it stalled and another conductor took the
node over) cannot overwrite anything: its next write raises ``LockLost``.

Drivers work on a detached copy of the node; ``save`` writes the columns they
changed, and leaving the block saves and releases.

A task whose work item outlived its deadline is abandoned (``abandon``): the
worker stops waiting for the call, and the call, if it ever returns, can
write nothing more (every write and wait raises ``LockLost``). Writes take
the task's lock, so an abandonment never lands in the middle of one and the
epoch it leaves is the one the worker fences the call out with.

What changed is found by comparing with a snapshot taken after each write
(``node_changes``), not with deep copies.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from metalforge.conductor import history, node_writes, transitions
from metalforge.conductor.context import ConductorContext
from metalforge.conductor.node_changes import ColumnSnapshot
from metalforge.config import ConductorSettings
from metalforge.db import (
    agent_sessions,
    bios_settings,
    firmware_components,
    flow_progress,
    queue,
    step_runs,
)
from metalforge.db.engine import lost_connection, now_for
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import Node, utcnow
from metalforge.db.tallies import count_on_commit, observed
from metalforge.drivers.base import Interface
from metalforge.tallies import STEP_DURATION


class NodeGone(LookupError):
    """The node was deleted."""


class LockLost(RuntimeError):
    """The reservation was taken over; this conductor must stop touching the node."""


class Interrupted(RuntimeError):
    """The conductor is stopping; the work will be resumed from the node's saved progress."""


ABANDON_CHECK = 0.5
"""Seconds a task's wait goes between looks at whether it was abandoned."""


@dataclasses.dataclass(frozen=True)
class _Memory:
    """What a write changes of a task besides the database (``NodeTask._ride_out``)."""

    step_runs: list[tuple[str, str, float]]
    with_transition: list[Callable[[Session], object]]
    on_release: list[Callable[[Session], object]]
    released: bool
    columns: dict[str, Any]
    """The node's columns: a transition moves its state and epoch in memory as it writes."""


_COLUMNS = tuple(c.key for c in Node.__table__.columns)


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
        self._saved = ColumnSnapshot(self._node)
        self._history: list[node_writes.Recorded] = []
        self._on_release: list[Callable[[Session], object]] = []
        self._with_transition: list[Callable[[Session], object]] = []
        self._step_runs: list[tuple[str, str, float]] = []
        self._released = False
        self._stamp: dt.datetime | None = None
        """The ``updated_at`` the pending write gives the node (``_pending``)."""
        self._progress = progress
        self._saved_progress = progress
        self._writing = threading.RLock()
        """Held for each write; ``abandon`` takes it so no write is half done."""
        self._abandoned = False
        self._table_writes: dict[str, Callable[[Session], object]] = {}
        """What drivers reported for tables of their own (BIOS settings, firmware), written
        with the node's next write; a later report of the same table replaces an earlier."""

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
        remaining = seconds
        while remaining > 0:
            self._check_abandoned()
            chunk = min(remaining, ABANDON_CHECK)
            if self.ctx.stopping.wait(chunk):
                raise Interrupted(f"conductor stopping during {self.purpose}")
            remaining -= chunk
        self._check_abandoned()

    def abandon(self, finished: Callable[[], bool]) -> bool:
        """Stop the work's call from writing anything more, unless ``finished()`` says it
        ended; whether it was abandoned. Afterwards ``epoch`` is the node's last written
        epoch, the one the worker retakes the node from."""
        with self._writing:
            if finished():
                return False
            self._abandoned = True
            return True

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def _check_abandoned(self) -> None:
        if self._abandoned:
            raise LockLost(f"{self.purpose} on node {self._node.uuid} passed its deadline")

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
        return self.ctx.drivers.family(self._node, family)

    def agent_session(self) -> agent_sessions.AgentSessionInfo | None:
        with self.ctx.db.read() as session:
            return agent_sessions.get(session, self._node.id)

    def begin_agent_session(self) -> None:
        # Written at once, not with the node: the agent may look up before the
        # node's next save, and must then find the new session.
        with self._writing, self.ctx.db.write() as session:
            self._fence(session)
            agent_sessions.begin(session, self._node.id)

    def end_agent_session(self) -> None:
        with self._writing, self.ctx.db.write() as session:
            self._fence(session)
            agent_sessions.end(session, self._node.id)

    def keep_agent_session(self) -> bool:
        # The idle check is queued in the same write: a crash after it cannot leave
        # a kept agent nobody ever powers off.
        node_id, host = self._node.id, self.ctx.hostname
        idle = dt.timedelta(seconds=self.settings.fast_track_timeout)
        with self._writing, self.ctx.db.write() as session:
            self._fence(session)
            kept_since = agent_sessions.keep(session, node_id)
            if kept_since is None:
                return False
            queue.enqueue(
                session,
                queue.AGENT_IDLE,
                node_id,
                dataclasses.asdict(agent_sessions.IdleCheck(kept_since.isoformat())),
                preferred_owner=host,
                not_before=now_for(session) + idle,
            )
        return True

    def store_bios_settings(self, settings: Sequence[bios_settings.Setting]) -> None:
        """Written with the node's next write (fenced like it): a step that read them saves
        the node when it ends."""
        kept = tuple(settings)
        self._table_writes["bios"] = lambda s: bios_settings.store(s, self._node.id, kept)

    def store_firmware(self, reported: Sequence[firmware_components.Reported]) -> None:
        """Written with the node's next write, as BIOS settings are."""
        kept = tuple(reported)
        self._table_writes["firmware"] = lambda s: firmware_components.store(s, self._node.id, kept)

    def _write_tables(self, session: Session) -> None:
        for write in self._table_writes.values():
            write(session)

    def _fence(self, session: Session) -> None:
        """Hold the node's row until the transaction ends, if this task still owns it.

        Agent-session writes are fenced like node writes: a conductor that
        lost the node (taken over while it stalled) must not void the token
        the new owner's agent holds. The row lock keeps a takeover from
        slipping in between this check and the write.
        """
        held = node_writes.still_held(session, self._node, self.ctx.hostname)
        self._check_abandoned()
        if not held:
            raise LockLost(f"lost the reservation of node {self._node.uuid}")

    def write_fenced(self, func: Callable[[Session], object]) -> None:
        """Write what ``func`` writes now, with the node's unsaved changes, if this task
        still holds the node (``LockLost`` otherwise): a step of a flow that others
        must see before the flow goes on (an inspection that began processing)."""
        with self._writing:
            changes, entries, _, progress = self._pending()

            def write() -> None:
                with self.ctx.db.write() as session:
                    self._fence(session)
                    self._flush(session, changes, entries, progress)
                    func(session)

            self._ride_out(write)
            self._remember()

    def on_release(self, func: Callable[[Session], object]) -> None:
        """Run ``func`` in the transaction that releases the reservation."""
        self._on_release.append(func)

    def clear_release_hooks(self) -> None:
        self._on_release.clear()

    def _changes(self) -> dict[str, Any]:
        return self._saved.changes(self._node)

    def _take_history(self) -> list[dict[str, Any]]:
        """The recorded events as history rows, stamped with the node's state now."""
        entries = node_writes.history_rows(self._node, self._history, self.ctx.hostname)
        self._history.clear()
        return entries

    def _pending(
        self, note: str | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]], str | None, FlowProgress | None]:
        """What the next write carries: changed columns, history rows and flow progress,
        with their messages scrubbed (``node_writes.scrub_messages``), worked out before
        the write transaction begins."""
        self._check_abandoned()
        if self._released:
            raise LockLost(f"node {self._node.uuid} was already released by {self.purpose}")
        changes, entries = self._changes(), self._take_history()
        progress = self._progress_change()
        # Every write stamps the node's updated_at with a time of its own (a fenced
        # update: it moves only while this task holds the node). The stamp is how a
        # write whose commit landed but whose answer was lost is told from one that
        # never happened (``_ride_out``).
        self._stamp = utcnow()
        changes["updated_at"] = self._node.updated_at = self._stamp
        note = node_writes.scrub_messages(self.ctx.db, self._node, changes, entries, note)
        return changes, entries, note, progress

    def _flush(
        self,
        session: Session,
        changes: dict[str, Any],
        entries: list[dict[str, Any]],
        progress: FlowProgress | None,
    ) -> None:
        holder = self.ctx.hostname
        if changes and not node_writes.save_columns(session, self._node, holder, changes):
            raise LockLost(f"lost the reservation of node {self._node.uuid}")
        if progress is not None:
            flow_progress.write(session.connection(), self._node.id, progress)
        self._write_tables(session)
        history.write(session, entries)
        self._write_step_runs(session)

    def _remember(self) -> None:
        self._saved = ColumnSnapshot(self._node)
        self._saved_progress = self._progress
        self._table_writes.clear()

    def save(self) -> None:
        """Write what changed on the node (fenced)."""
        with self._writing:
            changes, entries, _, progress = self._pending()

            def write() -> None:
                with self.ctx.db.write() as session:
                    self._flush(session, changes, entries, progress)

            self._ride_out(write)
            self._remember()

    def _ride_out(self, write: Callable[[], None]) -> None:
        """Run ``write``, one fenced write transaction; while the database is out of reach,
        run it again with the same content (``database.retry_*``).

        What a step did is then written once the database answers, instead of being
        lost with the transaction and the step run again from the saved progress. A
        node taken over meanwhile still fails the write (``LockLost``): it is fenced.

        The connection can drop after the server received the COMMIT: the write
        landed, but it reports an error. Running it again would insert its history
        a second time or find the node it released no longer held; so before an
        attempt that follows a dropped connection, the node's ``updated_at`` is read:
        if it holds this write's stamp, the write landed, and the task carries on as
        after a successful one.
        """
        before = self._memory()
        stamp = self._stamp
        after: _Memory | None = None

        def attempt() -> None:
            nonlocal after
            if after is not None and self._landed(stamp):
                self._restore(after)
                return
            try:
                write()
            except BaseException as exc:  # re-raised: the next attempt starts as this one did
                # If the COMMIT is what failed, the write ran to its end: remember
                # where it left the task, in case it landed after all.
                after = self._memory() if lost_connection(exc) else None
                self._restore(before)
                raise

        self.ctx.db.retrying(attempt, self.ctx.stopping)

    def _memory(self) -> _Memory:
        """What a write changes of the task besides the database."""
        held = self._node.__dict__
        return _Memory(
            list(self._step_runs),
            list(self._with_transition),
            list(self._on_release),
            self._released,
            {key: held[key] for key in _COLUMNS if key in held},
        )

    def _restore(self, memory: _Memory) -> None:
        self._step_runs = list(memory.step_runs)
        self._with_transition[:] = memory.with_transition
        self._on_release[:] = memory.on_release
        self._released = memory.released
        held = self._node.__dict__
        for key, value in memory.columns.items():
            if held.get(key) is not value:
                set_committed_value(self._node, key, value)

    def _landed(self, stamp: dt.datetime | None) -> bool:
        """Whether the node's row carries ``stamp``: the write that set it landed."""
        with self.ctx.db.read() as session:
            found = session.scalar(select(Node.updated_at).where(Node.id == self._node.id))
        return stamp is not None and found == stamp

    def with_next_transition(self, func: Callable[[Session], object]) -> None:
        """Run ``func`` in the transaction of the next ``transition`` (a write that
        must happen with it or not at all)."""
        self._with_transition.append(func)

    def transition(
        self,
        event: str,
        *,
        note: str | None = None,
        severity: str = history.INFO,
        passing: bool = False,
        **changes: Any,
    ) -> None:
        """Move the node through ``event`` with ``changes`` and what else changed, in one write.

        One fenced statement writes the unsaved changes, the new state and, when
        the flow parks the node (a stable, failure, wait or hold state), the
        release of the reservation, so nobody sees the new state while it is
        still locked; the release hooks run in the same transaction, and so do
        those given to ``with_next_transition``. ``passing``: the node only
        passes through the new state (another transition follows in this task),
        so the reservation is kept even where the flow would park.
        """
        with self._writing:
            self._transition(event, note, severity, changes, release=not passing)

    def _transition(
        self,
        event: str,
        note: str | None,
        severity: str,
        changes: dict[str, Any],
        *,
        release: bool = True,
    ) -> None:
        for key, value in changes.items():
            setattr(self._node, key, value)
        dirty, entries, note, progress = self._pending(note)
        self._ride_out(
            lambda: self._write_transition(
                event, dirty, entries, note, severity, progress, release=release
            )
        )
        self._remember()

    def _write_transition(
        self,
        event: str,
        dirty: dict[str, Any],
        entries: list[dict[str, Any]],
        note: str | None,
        severity: str,
        progress: FlowProgress | None,
        *,
        release: bool,
    ) -> None:
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
                    release=release,
                    earlier_history=entries,
                )
            except transitions.TransitionConflict as exc:
                raise LockLost(str(exc)) from exc
            if progress is not None:
                flow_progress.write(session.connection(), self._node.id, progress)
            self._write_tables(session)
            self._write_step_runs(session)
            for func in self._with_transition:
                func(session)
            self._with_transition.clear()
            if moved.released:
                self._run_release_hooks(session)

    def _run_release_hooks(self, session: Session) -> None:
        for func in self._on_release:
            func(session)
        self._on_release.clear()
        self._released = True

    def release(self) -> None:
        """Save and give the reservation back (nothing, for an abandoned task: the
        worker that abandoned it retakes the node)."""
        with self._writing:
            if self._abandoned:
                return
            if self._released:
                if self._changes() or self._history or self._progress_change():
                    raise LockLost(f"node {self._node.uuid} was changed after its release")
                return
            changes, entries, _, progress = self._pending()

            def write() -> None:
                with self.ctx.db.write() as session:
                    self._flush(session, {**changes, "reservation": None}, entries, progress)
                    self._run_release_hooks(session)

            self._ride_out(write)
            self._remember()
