"""The one way a node's provision state changes.

``apply`` checks the state table, writes the new state with a compare on the
old state and the node's epoch (and on who holds the reservation), bumps the
epoch and records a history event, all in the caller's transaction. Two
concurrent writers that read the same row cannot both win: the second
``UPDATE`` matches no row and raises ``TransitionConflict``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from sqlalchemy import Table, bindparam, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from metalforge import states
from metalforge.conductor import history
from metalforge.db.models import Node, utcnow
from metalforge.db.tallies import count_on_commit, counted
from metalforge.tallies import FLOWS_FINISHED, FLOWS_STARTED

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
    values: dict[str, Any] = {
        "provision_state": new_state,
        "target_provision_state": new_target,
        "provision_updated_at": now,
        "epoch": node.epoch + 1,
        "updated_at": now,
        **(changes or {}),
    }
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
    if isinstance(node, Node):
        for key, value in values.items():
            set_committed_value(node, key, value)
    text = f"{old_state} -> {new_state} ({event})"
    if note:
        text = f"{text}: {note}"
    moved = history.entry(
        node.id,
        "provisioning",
        text,
        severity=severity,
        conductor=conductor,
        user=user,
        state=new_state,
        target=new_target,
    )
    history.write(session, [*earlier_history, moved])
    _count_flows(session, states.flow_change(old_state, event, new_state))
    return Moved(new_state, new_target, values["epoch"], released)


def _count_flows(session: Session, change: states.FlowChange) -> None:
    """Count the flows the move ended and began, once (and if) it commits."""
    if change.ended is not None:
        count_on_commit(session, counted(FLOWS_FINISHED, change.ended))
    if change.started is not None:
        count_on_commit(session, counted(FLOWS_STARTED, (change.started,)))
