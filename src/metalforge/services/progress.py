"""How far a node's flow has got, and about how long it has left.

The plan and the step reached come from the node's flow progress; the
estimate of each step is the median of its recent runs on the same hardware
type (``db.step_runs``). The time left is the sum of the estimates of the
steps still to run, plus what remains of the running one's; it is unknown
(``None``) while any of them has never run on this hardware type, rather than
a guess that leaves steps out. Read by ``GET /v1/nodes/{node}/progress`` and
carried in the event stream, so both say the same.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from metalforge import states
from metalforge.conductor import history
from metalforge.db import flow_progress, step_runs
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import NodeHistory
from metalforge.services import lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version

DONE = "done"
RUNNING = "running"
PENDING = "pending"

NODE_COLUMNS = ("id", "uuid", "driver", "provision_state", "target_provision_state")
"""What the progress reads of the node itself."""


@dataclass(frozen=True, slots=True)
class StepProgress:
    interface: str
    step: str
    priority: int
    status: str
    """``done``, ``running`` or ``pending``."""
    estimated_seconds: float | None
    samples: int
    """How many recorded runs the estimate is the median of."""


@dataclass(frozen=True, slots=True)
class CurrentStep:
    interface: str
    step: str
    started_at: dt.datetime | None
    elapsed_seconds: float | None
    estimated_seconds: float | None


@dataclass(frozen=True, slots=True)
class Phase:
    """One state the node's flow has been through, from its history."""

    state: str
    entered_at: dt.datetime
    seconds: float
    """How long the node stayed there; for the state it is in, how long so far."""


@dataclass(frozen=True, slots=True)
class Progress:
    node_uuid: str
    provision_state: str
    target_provision_state: str | None
    flow: str | None
    """The flow the node is in (``clean``, ``deploy``, ``inspect``...); ``None`` at rest."""
    step_index: int
    step_count: int
    steps: tuple[StepProgress, ...]
    current_step: CurrentStep | None
    estimated_seconds_left: float | None
    estimated_finish_at: dt.datetime | None
    flow_started_at: dt.datetime | None = None
    phases: tuple[Phase, ...] = ()
    """The states of the running (or last) flow so far, oldest first: its timeline.
    Read for ``GET /v1/nodes/{node}/progress`` only; the event stream leaves it out."""

    def to_json(self) -> dict[str, Any]:
        """The API's and the event stream's form (times in ISO 8601)."""
        current = self.current_step
        return {
            "node_uuid": self.node_uuid,
            "provision_state": self.provision_state,
            "target_provision_state": self.target_provision_state,
            "flow": self.flow,
            "step_index": self.step_index,
            "step_count": self.step_count,
            "steps": [
                {
                    "interface": s.interface,
                    "step": s.step,
                    "priority": s.priority,
                    "status": s.status,
                    "estimated_seconds": s.estimated_seconds,
                    "samples": s.samples,
                }
                for s in self.steps
            ],
            "current_step": None
            if current is None
            else {
                "interface": current.interface,
                "step": current.step,
                "started_at": _iso(current.started_at),
                "elapsed_seconds": current.elapsed_seconds,
                "estimated_seconds": current.estimated_seconds,
            },
            "estimated_seconds_left": self.estimated_seconds_left,
            "estimated_finish_at": _iso(self.estimated_finish_at),
            "flow_started_at": _iso(self.flow_started_at),
            "phases": [
                {"state": p.state, "entered_at": p.entered_at.isoformat(), "seconds": p.seconds}
                for p in self.phases
            ],
        }


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def node_progress(svc: Services, ident: str, version: Version) -> Progress:
    """The progress of node ``ident`` (404 if there is none by that name), with the
    timeline of its flow."""
    with svc.db.snapshot() as connection:
        row = lookup.find_node_row(connection, ident, version, (*NODE_COLUMNS, "flow_started_at"))
        progress = flow_progress.load(connection, row.id)
        now = svc.db.now()
        shown = progress_of(connection, row, progress, now)
        started = row.flow_started_at
        if started is None:
            return shown
        return dataclasses.replace(
            shown, flow_started_at=started, phases=_phases(connection, row.id, started, now)
        )


MAX_PHASES = 200
"""A flow's states shown at most (a cleaning of many steps waits once per step)."""


def _phases(
    connection: Connection, node_id: int, since: dt.datetime, now: dt.datetime
) -> tuple[Phase, ...]:
    """The states the node moved into since its flow began, each with how long it stayed."""
    moves = connection.execute(
        select(NodeHistory.state, NodeHistory.created_at)
        .where(
            NodeHistory.node_id == node_id,
            NodeHistory.event_type == history.MOVE,
            NodeHistory.created_at >= since,
            NodeHistory.state.is_not(None),
        )
        .order_by(NodeHistory.id)
        .limit(MAX_PHASES)
    ).all()
    phases: list[Phase] = []
    for position, (state, entered) in enumerate(moves):
        left = moves[position + 1][1] if position + 1 < len(moves) else now
        phases.append(Phase(str(state), entered, max(0.0, (left - entered).total_seconds())))
    return tuple(phases)


def progress_of(
    connection: Connection, node: Any, progress: FlowProgress, now: dt.datetime
) -> Progress:
    """The progress of ``node`` (a row with ``NODE_COLUMNS``) whose flow progress is
    ``progress``, at ``now`` (the database's clock, which step times are taken on)."""
    state = node.provision_state
    busy = state in states.BUSY_STATES
    flow = states.FLOW_OF.get(state)
    plan = progress.plan if busy and progress.plan is not None else ()
    estimates = step_runs.estimates(
        connection, node.driver, [(s["interface"], s["step"]) for s in plan]
    )
    index = min(progress.step_index, len(plan))
    steps = tuple(_step(record, i, index, estimates) for i, record in enumerate(plan))
    current = _current(steps, index, progress, now) if index < len(steps) else None
    left = _time_left(steps, current)
    return Progress(
        node_uuid=node.uuid,
        provision_state=state,
        target_provision_state=node.target_provision_state,
        flow=flow,
        step_index=index,
        step_count=len(plan),
        steps=steps,
        current_step=current,
        estimated_seconds_left=left,
        estimated_finish_at=None if left is None else now + dt.timedelta(seconds=left),
    )


def _step(
    record: dict[str, Any],
    position: int,
    index: int,
    estimates: dict[step_runs.StepKey, step_runs.Estimate],
) -> StepProgress:
    estimate = estimates.get((record["interface"], record["step"]))
    status = DONE if position < index else RUNNING if position == index else PENDING
    return StepProgress(
        interface=record["interface"],
        step=record["step"],
        priority=int(record.get("priority", 0)),
        status=status,
        estimated_seconds=None if estimate is None else estimate.seconds,
        samples=0 if estimate is None else estimate.samples,
    )


def _current(
    steps: tuple[StepProgress, ...], index: int, progress: FlowProgress, now: dt.datetime
) -> CurrentStep:
    step = steps[index]
    started = progress.step_started_at
    return CurrentStep(
        interface=step.interface,
        step=step.step,
        started_at=None if started is None else dt.datetime.fromtimestamp(started, dt.UTC),
        elapsed_seconds=None if started is None else max(0.0, now.timestamp() - started),
        estimated_seconds=step.estimated_seconds,
    )


def _time_left(steps: tuple[StepProgress, ...], current: CurrentStep | None) -> float | None:
    if not steps:
        return None  # no plan (yet): nothing to estimate from
    left = 0.0
    for step in steps:
        if step.status == DONE:
            continue
        if step.estimated_seconds is None:
            return None
        if step.status == RUNNING and current is not None:
            # A step running past its median has "about nothing" left, not a negative time.
            left += max(0.0, step.estimated_seconds - (current.elapsed_seconds or 0.0))
        else:
            left += step.estimated_seconds
    return left
