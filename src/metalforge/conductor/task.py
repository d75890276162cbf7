"""The node reservation: a lock taken as a context manager with a purpose.

``with acquire(ctx, node_id, "deploy") as task:`` sets ``nodes.reservation``
to this conductor and bumps the node's epoch (the fencing token). Every later
write is conditional on both, so a conductor that lost its lock (it stalled
and another conductor took the node over) cannot overwrite anything: its next
write raises ``LockLost``. A reservation held by a conductor that stopped
heartbeating may be taken at once.

Drivers work on a detached copy of the node; ``save`` writes the columns they
changed, and leaving the block saves and releases.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.conductor import history, transitions
from metalforge.conductor.context import ConductorContext
from metalforge.db.models import Conductor, Node, utcnow


class NodeLocked(RuntimeError):
    """Another live conductor holds the node's reservation."""

    def __init__(self, node_id: int | str, holder: str | None) -> None:
        super().__init__(
            f"Node {node_id} is locked by host {holder}, please retry after the "
            "current operation is completed."
        )
        self.holder = holder


class NodeGone(LookupError):
    """The node was deleted."""


class LockLost(RuntimeError):
    """The reservation was taken over; this conductor must stop touching the node."""


class Interrupted(RuntimeError):
    """The conductor is stopping; the work will be resumed from the node's saved progress."""


_COLUMNS = [c.key for c in Node.__table__.columns if c.key not in ("id", "reservation", "epoch")]


def dead_conductors(ctx: ConductorContext) -> Any:
    """Subquery: hostnames of conductors that stopped heartbeating or went offline."""
    cutoff = utcnow() - ctx.dead_after
    return select(Conductor.hostname).where(
        or_(Conductor.heartbeat_at < cutoff, Conductor.online.is_(False))
    )


class NodeTask:
    """A node held under this conductor's reservation; implements ``DriverTask``."""

    def __init__(self, ctx: ConductorContext, node: Node, purpose: str) -> None:
        self.ctx = ctx
        self.purpose = purpose
        self._node = node
        self._saved = {key: copy.deepcopy(getattr(node, key)) for key in _COLUMNS}
        self._history: list[tuple[str, str, str, float | None]] = []
        self._on_release: list[Callable[[Session], object]] = []
        self._released = False

    @property
    def node(self) -> Node:
        return self._node

    @property
    def released(self) -> bool:
        """The reservation was given back when the flow parked the node."""
        return self._released

    @property
    def epoch(self) -> int:
        return self._node.epoch

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

    def on_release(self, func: Callable[[Session], object]) -> None:
        """Run ``func`` in the transaction that releases the reservation."""
        self._on_release.append(func)

    def clear_release_hooks(self) -> None:
        self._on_release.clear()

    def _changes(self) -> dict[str, Any]:
        return {
            key: getattr(self._node, key)
            for key in _COLUMNS
            if getattr(self._node, key) != self._saved[key]
        }

    def _flush(self, session: Session, extra: dict[str, Any] | None = None) -> None:
        if self._released:
            raise LockLost(f"node {self._node.uuid} was already released by {self.purpose}")
        changes = {**self._changes(), **(extra or {})}
        if changes:
            changes.setdefault("updated_at", utcnow())
            result = session.execute(
                update(Node)
                .where(
                    Node.id == self._node.id,
                    Node.reservation == self.ctx.hostname,
                    Node.epoch == self._node.epoch,
                )
                .values(**changes)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise LockLost(f"lost the reservation of node {self._node.uuid}")
        self._write_history(session)
        self._remember()

    def _write_history(self, session: Session) -> None:
        for event_type, event, severity, duration in self._history:
            history.record(
                session,
                self._node.id,
                event_type,
                event,
                severity=severity,
                conductor=self.ctx.hostname,
                state=self._node.provision_state,
                target=self._node.target_provision_state,
                duration=duration,
            )
        self._history.clear()

    def _remember(self) -> None:
        self._saved = {key: copy.deepcopy(getattr(self._node, key)) for key in _COLUMNS}

    def save(self) -> None:
        """Write what changed on the node (fenced)."""
        with self.ctx.db.write() as session:
            self._flush(session)

    def transition(
        self, event: str, *, note: str | None = None, severity: str = history.INFO, **changes: Any
    ) -> None:
        """Save, then move the node through ``event`` (with ``changes``), in one transaction."""
        for key, value in changes.items():
            setattr(self._node, key, value)
        with self.ctx.db.write() as session:
            self._flush(session)
            current = session.get(Node, self._node.id, populate_existing=True)
            if current is None:
                raise NodeGone(self._node.uuid)
            session.expunge(current)
            try:
                transitions.apply(
                    session,
                    current,
                    event,
                    holder=self.ctx.hostname,
                    conductor=self.ctx.hostname,
                    note=note,
                    severity=severity,
                )
            except transitions.TransitionConflict as exc:
                raise LockLost(str(exc)) from exc
            for key in (
                "provision_state",
                "target_provision_state",
                "provision_updated_at",
                "epoch",
                "updated_at",
            ):
                setattr(self._node, key, getattr(current, key))
            self._remember()
            if states.parks(self._node.provision_state):
                # The flow rests or waits: let go of the node in this same
                # transaction, so nobody sees the new state while it is still locked.
                self._release_in(session)

    def _release_in(self, session: Session) -> None:
        self._flush(session, {"reservation": None})
        for func in self._on_release:
            func(session)
        self._on_release.clear()
        self._released = True

    def release(self) -> None:
        if self._released:
            if self._changes() or self._history:
                raise LockLost(f"node {self._node.uuid} was changed after its release")
            return
        with self.ctx.db.write() as session:
            self._release_in(session)


def _lock(ctx: ConductorContext, session: Session, node_id: int) -> Node:
    # Read under the row lock the update takes anyway, so the takeover note names the real holder.
    previous = session.scalar(select(Node.reservation).where(Node.id == node_id).with_for_update())
    result = session.execute(
        update(Node)
        .where(
            Node.id == node_id,
            or_(
                Node.reservation.is_(None),
                Node.reservation.in_(dead_conductors(ctx)),
            ),
        )
        .values(reservation=ctx.hostname, epoch=Node.epoch + 1, conductor_affinity=ctx.hostname)
        .execution_options(synchronize_session=False)
    )
    node = session.get(Node, node_id, populate_existing=True)
    if node is None:
        raise NodeGone(str(node_id))
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise NodeLocked(node.uuid, node.reservation)
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
            state=node.provision_state,
            target=node.target_provision_state,
        )
    session.expunge(node)
    return node


@contextmanager
def acquire(ctx: ConductorContext, node_id: int, purpose: str) -> Iterator[NodeTask]:
    """Hold node ``node_id`` under this conductor's reservation for ``purpose``."""
    with ctx.db.write() as session:
        node = _lock(ctx, session, node_id)
    task = NodeTask(ctx, node, purpose)
    try:
        yield task
    except LockLost:
        raise
    except BaseException:
        task.clear_release_hooks()
        _release_quietly(task)
        raise
    else:
        task.release()


def _release_quietly(task: NodeTask) -> None:
    with suppress(LockLost):
        task.release()
