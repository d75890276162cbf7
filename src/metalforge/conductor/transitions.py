"""The one way a node's provision state changes.

``apply`` checks the state table, writes the new state with a compare on the
old state and the node's epoch (and on who holds the reservation), bumps the
epoch and records a history event, all in the caller's transaction. Two
concurrent writers that read the same row cannot both win: the second
``UPDATE`` matches no row and raises ``TransitionConflict``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from sqlalchemy import Table, bindparam, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from metalforge import states
from metalforge.conductor import history
from metalforge.db.models import Node, utcnow
from metalforge.db.tallies import count_on_commit, counted, observed
from metalforge.tallies import FLOW_DURATION, FLOWS_FINISHED, FLOWS_STARTED, STATE_DURATION

_NODES = cast(Table, Node.__table__)
_MOVE = update(_NODES).where(
    _NODES.c.id == bindparam("b_id"),
    _NODES.c.provision_state == bindparam("b_state"),
    _NODES.c.epoch == bindparam("b_epoch"),
)
# Built once: the SET clause comes from the keys of the parameters, so one
# statement serves every set of changes without being rebuilt per call.
_MOVE_UNLOCKED = _MOVE.where(_NODES.c.reservation.is_(None))
_MOVE_HELD = _MOVE.where(_NODES.c.reservation == bindparam("b_holder"))


class NodeRef(Protocol):
    """What a transition reads from the node: an ORM ``Node`` or a Core row."""

    @property
    def id(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def provision_state(self) -> str: ...
    @property
    def target_provision_state(self) -> str | None: ...
    @property
    def epoch(self) -> int: ...


class TransitionConflict(RuntimeError):
    """The node changed (or was locked) between reading and writing it."""


@dataclass(frozen=True, slots=True)
class Moved:
    """Result of a successful transition."""

    provision_state: str
    target_provision_state: str | None
    epoch: int
    released: bool = False
    """The reservation was cleared by the same statement (``release``)."""


def apply(
    session: Session,
    node: NodeRef,
    event: str,
    *,
    holder: str | None = None,
    changes: dict[str, Any] | None = None,
    conductor: str | None = None,
    note: str | None = None,
    severity: str = history.INFO,
    release: bool = False,
    earlier_history: Sequence[dict[str, Any]] = (),
    user: str | None = None,
) -> Moved:
    """Move ``node`` through ``event``; ``node`` holds the values read before.

    ``holder`` is the conductor holding the node's reservation (``None``: the
    API, which may only act on an unlocked node). ``changes`` are other
    columns written in the same statement (``last_error``, step fields...).
    With ``release``, a move into a state where the flow stops (``states.parks``)
    also clears the reservation in that statement: nobody can see the new
    state while the node is still locked. ``earlier_history`` (entries from
    ``history.entry``) is written just before the transition's own entry, in
    one statement. ``user`` is who asked for the move, for the history entry.
    On success an ORM ``node`` is updated in memory too.

    Raises ``states.InvalidTransition`` when the table forbids the move and
    ``TransitionConflict`` when the row is not as it was read.
    """
    transition = states.find(node.provision_state, event)
    new_state, new_target = states.resolve(transition, node.target_provision_state)
    now = utcnow()
    flows = states.flow_change(node.provision_state, event, new_state)
    values: dict[str, Any] = {
        "provision_state": new_state,
        "target_provision_state": new_target,
        "provision_updated_at": now,
        "epoch": node.epoch + 1,
        "updated_at": now,
        **(changes or {}),
    }
    if flows.started is not None:
        values["flow_started_at"] = now
    released = release and holder is not None and states.parks(new_state)
    if released:
        values["reservation"] = None
    params = {**values, "b_id": node.id, "b_state": node.provision_state, "b_epoch": node.epoch}
    if holder is None:
        result = session.connection().execute(_MOVE_UNLOCKED, params)
    else:
        result = session.connection().execute(_MOVE_HELD, {**params, "b_holder": holder})
    if result.rowcount != 1:
        raise TransitionConflict(
            f"node {node.uuid} changed while moving from {node.provision_state!r} by {event!r}"
        )
    old_state = node.provision_state
    timing = Timing.of(node)
    if isinstance(node, Node):
        for key, value in values.items():
            set_committed_value(node, key, value)
    text = f"{old_state} -> {new_state} ({event})"
    if note:
        text = f"{text}: {note}"
    stayed = _seconds_since(timing.entered, now)
    moved = history.entry(
        node.id,
        history.MOVE,
        text,
        severity=severity,
        conductor=conductor,
        user=user,
        state=new_state,
        target=new_target,
        duration=stayed,
    )
    history.write(session, [*earlier_history, moved])
    _count_flows(session, flows, old_state, timing, stayed, now)
    return Moved(new_state, new_target, values["epoch"], released)


@dataclass(frozen=True, slots=True)
class Timing:
    """What a transition reads to time the phase it ends (absent on a bare row)."""

    entered: dt.datetime | None
    """When the node entered the state it leaves (``provision_updated_at``)."""
    flow_started: dt.datetime | None
    hardware_type: str

    @classmethod
    def of(cls, node: NodeRef) -> Timing:
        return cls(
            getattr(node, "provision_updated_at", None),
            getattr(node, "flow_started_at", None),
            str(getattr(node, "driver", None) or "unknown"),
        )


def _seconds_since(then: dt.datetime | None, now: dt.datetime) -> float | None:
    return None if then is None else max(0.0, (now - then).total_seconds())


def _count_flows(
    session: Session,
    change: states.FlowChange,
    old_state: str,
    timing: Timing,
    stayed: float | None,
    now: dt.datetime,
) -> None:
    """Count the flows the move ended and began, and time the phase it ended, once (and
    if) it commits."""
    flow = states.FLOW_OF.get(old_state)
    if flow is not None and stayed is not None:
        labels = (flow, old_state, timing.hardware_type)
        count_on_commit(session, observed(STATE_DURATION, labels, stayed))
    if change.ended is not None:
        count_on_commit(session, counted(FLOWS_FINISHED, change.ended))
        took = _seconds_since(timing.flow_started, now)
        if took is not None:
            labels = (*change.ended, timing.hardware_type)
            count_on_commit(session, observed(FLOW_DURATION, labels, took))
    if change.started is not None:
        count_on_commit(session, counted(FLOWS_STARTED, (change.started,)))
