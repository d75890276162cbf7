"""Running a plan of steps, one at a time, resumable after a crash.

The plan and the index of the step reached live in the node's flow progress
(``db.flow_progress``, ``task.progress``); the running step is shown in
``clean_step``/``deploy_step``/``service_step``. The index is saved before
each step starts, so a conductor that takes the node over runs the
interrupted step again and never one that finished: steps must be idempotent.

An asynchronous step parks the node in the wait state and queues a check; the
check (``poll``) finishes it, or fails it when it has waited too long.

Cleaning, deploying and servicing differ only in what their ``StepFlow``
value declares (its kind, the node column showing the running step, what a
failure leaves behind; interfaces run every kind's steps through one
``execute_step``); nothing here branches on a
flow's name, so a new step flow is a new value, a column and a ``FlowSpec``
naming it (docs/extending.md).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import InstrumentedAttribute

from metalforge import states
from metalforge.conductor import deploy_plan, history, step_plans
from metalforge.conductor.task import NodeTask
from metalforge.db import queue
from metalforge.db.flow_progress import FlowProgress, StepKind
from metalforge.db.models import Node, NodeHistory
from metalforge.drivers.base import (
    DriverError,
    StepsChanged,
    StepsNotKnown,
)

Complete = Callable[[NodeTask, Sequence[step_plans.Step]], list[step_plans.Step]]
"""Complete a provisional plan, given the steps already run (see ``StepFlow.completes``)."""


@dataclass(frozen=True)
class StepFlow:
    """One kind of step plan: what the functions below need to run, show and end it."""

    name: StepKind
    """The flow progress' kind, whose steps the plan is made of (the interfaces'
    ``clean``, ``deploy`` or ``service`` steps), and the prefix of the history events."""
    column: InstrumentedAttribute[dict[str, Any]]
    """The node column showing the running step (``Node.clean_step``)."""
    maintenance_on_failure: bool
    """A failure also puts the node in maintenance (a half-cleaned node must not be used)."""
    replans: Callable[[NodeTask], bool] = lambda _task: False
    """Whether the flow starts again with a new plan when a step finds the node's steps
    changed since the plan was made (``StepsChanged``); otherwise that fails the flow."""
    completes: Complete | None = None
    """Completes a provisional plan (``progress.completes_after``) once that step has
    run: given the steps done, the final plan, of which they are the start; raises
    ``StepRequestError`` or ``StepsNotKnown`` naming why it cannot be completed."""

    def shown(self, node: Node) -> dict[str, Any]:
        """The running step as the node shows it (``{}`` when none runs)."""
        return dict(getattr(node, self.column.key) or {})

    def show(self, node: Node, record: dict[str, Any]) -> None:
        """Show ``record`` as the running step (``{}``: none)."""
        setattr(node, self.column.key, record)


def _automated(task: NodeTask) -> bool:
    """Automated cleaning (its steps are idempotent and chosen by the service); manual
    cleaning runs what the operator asked and is not started again behind their back."""
    return task.node.target_provision_state != states.MANAGEABLE


CLEAN = StepFlow(
    name="clean",
    column=Node.clean_step,
    maintenance_on_failure=True,
    replans=_automated,
)
DEPLOY = StepFlow(
    name="deploy",
    column=Node.deploy_step,
    maintenance_on_failure=False,
    completes=deploy_plan.complete_for_task,
)
SERVICE = StepFlow(
    name="service",
    column=Node.service_step,
    maintenance_on_failure=False,
)

BY_NAME: Mapping[StepKind, StepFlow] = MappingProxyType(
    {kind.name: kind for kind in (CLEAN, DEPLOY, SERVICE)}
)
"""Every step flow, by the name the flow progress records."""


Finish = Callable[[NodeTask], None]
"""Run after the last step and before the flow ends (cleaning stops the ramdisk)."""


def requested(task: NodeTask, kind: StepFlow) -> list[dict[str, Any]]:
    """The steps the request asked for (``store_plan`` keeps them only for a provisional
    plan's completion)."""
    progress = task.progress
    return list(progress.requested) if progress.flow == kind.name else []


def take_requested(task: NodeTask, kind: StepFlow) -> list[dict[str, Any]]:
    """The steps the request asked for, removed from the progress now that the plan uses them."""
    progress = task.progress
    if progress.flow != kind.name:
        return []
    task.progress = dataclasses.replace(progress, requested=())
    return list(progress.requested)


def has_plan(task: NodeTask, kind: StepFlow) -> bool:
    return task.progress.has_plan(kind.name)


def store_plan(
    task: NodeTask,
    kind: StepFlow,
    plan: Sequence[step_plans.Step],
    *,
    completes_after: str | None = None,
) -> None:
    """Record the plan (and index 0) before any step runs; provisional until
    ``completes_after`` has run (the request's steps are kept for its completion)."""
    claim(task, kind)
    progress = task.progress
    task.progress = dataclasses.replace(
        progress,
        plan=tuple(s.to_record() for s in plan),
        step_index=0,
        completes_after=completes_after,
        requested=progress.requested if completes_after is not None else (),
    )
    names = ", ".join(f"{s.name}({s.priority})" for s in plan) or "no steps"
    task.record(f"{kind.name}_plan", f"{kind.name} plan: {names}")
    # Saved together with the start of the first step (or the end of the flow).


def claim(task: NodeTask, kind: StepFlow) -> None:
    """Make the node's progress a ``kind`` flow's before the flow records anything in it.

    What it holds is kept if it is already one (the request's steps, the
    ramdisk cleaning booted before it planned) or no flow's yet; another
    flow's leftovers are never read as this one's.
    """
    progress = task.progress
    if progress.flow == kind.name:
        return
    if progress.flow is None:
        task.progress = dataclasses.replace(progress, flow=kind.name)
    else:
        task.progress = FlowProgress(flow=kind.name)


def clear_plan(task: NodeTask, kind: StepFlow) -> None:
    """The flow ended: nothing of its progress stays (the next flow starts afresh)."""
    task.progress = FlowProgress()
    kind.show(task.node, {})


def schedule_poll(task: NodeTask, delay: float) -> None:
    """Check on the node again in ``delay`` seconds (queued when the lock is released)."""
    node_id = task.node.id
    when = task.ctx.db.now() + dt.timedelta(seconds=delay)
    task.on_release(
        lambda session: queue.enqueue_provision(
            session, node_id, preferred_owner=task.ctx.hostname, not_before=when
        )
    )


def fail(task: NodeTask, kind: StepFlow, message: str) -> None:
    """End the flow in its failure state with ``message`` in ``last_error``."""
    changes: dict[str, Any] = {"last_error": message, kind.column.key: {}}
    if kind.maintenance_on_failure:
        changes.update(maintenance=True, maintenance_reason=message, fault=f"{kind.name} failure")
    task.record(f"{kind.name}_failed", message, history.ERROR)
    # A ramdisk agent left running (power stays as it was, for the operator to
    # look at) must not keep a working token: nothing may drive it any more.
    task.end_agent_session()
    task.transition(states.FAIL, note=message, severity=history.ERROR, **changes)


def _current(task: NodeTask, kind: StepFlow) -> tuple[list[step_plans.Step], int]:
    progress = task.progress
    if not progress.has_plan(kind.name):
        return [], 0
    return [step_plans.from_record(r) for r in progress.plan or ()], progress.step_index


def _set_index(task: NodeTask, index: int) -> None:
    task.progress = dataclasses.replace(task.progress, step_index=index)


def _step_done(task: NodeTask, kind: StepFlow, step: step_plans.Step) -> None:
    started = task.progress.step_started_at
    if started is None:
        started = task.now()
    took = task.now() - started
    task.record(f"{kind.name}_step", f"{step.name} finished in {took:.3f}s", duration=took)
    task.record_step_run(step.interface, step.step, took)


def run(task: NodeTask, kind: StepFlow, finish: Finish | None = None) -> None:
    """Run the node's plan from the stored index until it ends, waits or fails."""
    plan, index = _current(task, kind)
    while True:
        if _completes_now(task, plan, index):
            completed = _complete(task, kind, plan, index)
            if completed is None:
                return
            plan = completed
        if index >= len(plan):
            break
        step = plan[index]
        if task.ctx.stopping.is_set():
            return  # the saved index lets the next owner resume here
        kind.show(task.node, step.to_record())
        task.progress = dataclasses.replace(
            task.progress, step_started_at=task.now(), step_heartbeat_at=None
        )
        task.record(
            f"{kind.name}_step",
            f"{step.name} started (priority {step.priority}, step {index + 1} of {len(plan)})",
        )
        # One write records the previous step's end, the new index and this
        # step's start: the index is durable before this step runs.
        task.save()
        try:
            interface = task.ctx.drivers.family(task.node, step.interface)
            outcome = interface.execute_step(task, kind.name, step.to_record())
        except StepsChanged as exc:
            _steps_changed(task, kind, step, exc)
            return
        except DriverError as exc:
            fail(task, kind, f"{kind.name} step {step.name} failed: {exc}")
            return
        if outcome == "wait":
            schedule_poll(task, task.ctx.settings.async_poll_interval)
            task.transition(states.WAIT, note=f"waiting for {step.name}")
            return
        _step_done(task, kind, step)
        index += 1
        _set_index(task, index)
    if finish is not None:
        try:
            finish(task)
        except DriverError as exc:
            fail(task, kind, f"{kind.name} could not be completed after its last step: {exc}")
            return
    clear_plan(task, kind)
    task.transition(states.DONE)


def _completes_now(task: NodeTask, plan: Sequence[step_plans.Step], index: int) -> bool:
    """The plan is provisional and the step it waited for has run (level-triggered: a
    conductor that took the node over completes it too)."""
    after = task.progress.completes_after
    return after is not None and any(s.name == after for s in plan[:index])


def _complete(
    task: NodeTask, kind: StepFlow, plan: Sequence[step_plans.Step], index: int
) -> list[step_plans.Step] | None:
    """Complete the provisional plan with the agent's steps, keeping the index; ``None``
    when it cannot be (the flow failed, naming why)."""
    after = task.progress.completes_after
    try:
        if kind.completes is None:
            raise step_plans.StepRequestError(f"{kind.name} plans cannot be completed")
        completed = kind.completes(task, plan[:index])
    except step_plans.StepRequestError as exc:
        fail(task, kind, f"{kind.name.capitalize()} refused once the ramdisk agent reported: {exc}")
        return None
    except StepsNotKnown as exc:
        fail(task, kind, f"{kind.name.capitalize()} cannot go on after {after}: {exc}")
        return None
    task.progress = dataclasses.replace(
        task.progress,
        plan=tuple(s.to_record() for s in completed),
        completes_after=None,
        requested=(),
    )
    added = [s for s in completed[index:] if s.in_band]
    names = ", ".join(f"{s.name}({s.priority})" for s in added) or "none"
    task.record(
        f"{kind.name}_plan",
        f"{kind.name} plan completed with the ramdisk agent's steps: {names}; "
        f"{len(completed)} steps in all",
    )
    return completed


def poll(
    task: NodeTask,
    kind: StepFlow,
    timeout: float,
    finish: Finish | None = None,
    aborted: Finish | None = None,
) -> None:
    """The node waits on an asynchronous step: finish it, time it out (``timeout`` seconds
    without a sign of progress, the flow's bound) or check again. ``aborted``: what takes
    the node on after an abort that waited for this step (see ``abort``)."""
    plan, index = _current(task, kind)
    if index >= len(plan):
        task.transition(states.RESUME)
        run(task, kind, finish)
        return
    step = plan[index]
    progress = task.progress
    started = progress.step_started_at if progress.step_started_at is not None else task.now()
    # A step that reports progress (an agent that is alive and still working)
    # is timed from its last progress, so a many-hour erase is not cut short.
    last_sign = max(started, progress.step_heartbeat_at or 0.0)
    interface = task.ctx.drivers.family(task.node, step.interface)
    try:
        outcome = interface.check_step(task, step.step)
    except StepsChanged as exc:
        _steps_changed(task, kind, step, exc)
        return
    except DriverError as exc:
        fail(task, kind, f"{kind.name} step {step.name} failed: {exc}")
        return
    if outcome == "wait":
        if task.now() - last_sign > timeout:
            fail(
                task,
                kind,
                f"timed out after {timeout:.0f}s waiting for {kind.name} step {step.name} "
                "to finish",
            )
            return
        schedule_poll(task, task.ctx.settings.async_poll_interval)
        return
    _step_done(task, kind, step)
    _set_index(task, index + 1)
    if kind.shown(task.node).get("abort_after"):
        abort(task, kind, step, after=True, then=aborted)
        return
    task.transition(states.RESUME)
    run(task, kind, finish)


def _steps_changed(
    task: NodeTask, kind: StepFlow, step: step_plans.Step, exc: StepsChanged
) -> None:
    """The node offers other steps than the plan was made from: plan again from the
    start (the flow's hook builds the new plan), or fail where the flow may not."""
    if not kind.replans(task):
        fail(task, kind, f"{kind.name} step {step.name} failed: {exc}")
        return
    replanned = _replans(task, kind)
    if replanned >= MAX_REPLANS:
        fail(
            task,
            kind,
            f"{kind.name} step {step.name} failed: {exc}, and the node's steps already changed "
            f"{replanned} times since the flow began: it is not planned again",
        )
        return
    message = f"{exc}; {kind.name} starts again with the steps the node offers now"
    task.record(f"{kind.name}_plan", message, history.WARNING)
    task.progress = dataclasses.replace(
        task.progress, plan=None, step_index=0, step_started_at=None, step_heartbeat_at=None
    )
    kind.show(task.node, {})
    if task.node.provision_state in states.WAIT_STATES:
        task.transition(states.RESUME, note=message)
    else:  # the flow's hook plans again when the item queued on release runs
        schedule_poll(task, 0.0)


MAX_REPLANS = 3
"""Times one flow plans again because the node's steps changed (an agent whose hardware
managers keep changing would otherwise hold the node in a loop for ever)."""


def _replans(task: NodeTask, kind: StepFlow) -> int:
    """How many times this flow has planned again (its history since the flow began)."""
    started = task.node.flow_started_at
    query = select(func.count()).where(
        NodeHistory.node_id == task.node.id,
        NodeHistory.event_type == f"{kind.name}_plan",
        NodeHistory.severity == history.WARNING,  # a plan made again, not the first one
    )
    if started is not None:
        query = query.where(NodeHistory.created_at >= started)
    with task.ctx.db.read() as session:
        return int(session.scalar(query) or 0)


def abort(
    task: NodeTask,
    kind: StepFlow,
    step: step_plans.Step | None,
    *,
    after: bool = False,
    then: Finish | None = None,
) -> None:
    """Stop the flow at the operator's request: into its failure state, or only through
    it when ``then`` takes the node on from there (servicing goes back to ``active``)."""
    if step is not None and not after:
        task.ctx.drivers.family(task.node, step.interface).abort_step(task, step.step)
    where = f" during {step.name}" if step else ""
    message = f"{kind.name.capitalize()} aborted by the operator{where}"
    if after:
        message = f"{message} (after the non-abortable step finished)"
    task.record(f"{kind.name}_aborted", message, history.WARNING)
    changes: dict[str, Any] = {"last_error": message, kind.column.key: {}}
    task.transition(states.ABORT, note=message, passing=then is not None, **changes)
    if then is not None:
        then(task)


def current_step(task: NodeTask, kind: StepFlow) -> step_plans.Step | None:
    plan, index = _current(task, kind)
    return plan[index] if index < len(plan) else None
