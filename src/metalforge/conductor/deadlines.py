"""Work items run under a deadline: a call that outlives it is abandoned, not waited on.

A worker runs its item's call in a thread of the call's own and waits for
it at most the kind's deadline (``conductor.work_deadlines``). Past it the
task is abandoned (it can write nothing more), the worker fails the node
with an error naming the deadline and goes back to work. Python cannot stop
a thread, so the call's thread is left to end by itself and is counted here, against its node's
project's share of the workers (``workers_per_project``, so one project's
calls that never end stop only that project's work); while
``max_abandoned_calls`` of them still run, the conductor claims no more
work at all, so a BMC that never answers cannot make it grow threads for
ever. No stored value or BMC can extend a deadline: it is the settings'.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from metalforge.conductor.context import AbandonedCalls, project_of
from metalforge.conductor.task import NodeTask
from metalforge.conductor.work import NodeWork
from metalforge.config import ConductorSettings

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Overdue:
    """A call abandoned at its deadline."""

    seconds: float
    message: str


def run_with_deadline(
    settings: ConductorSettings,
    abandoned: AbandonedCalls,
    work: NodeWork[Any],
    task: NodeTask,
    payload: Any,
) -> Overdue | None:
    """Run ``work`` on ``task``; ``Overdue`` if it was abandoned at its deadline.

    What the call raises is raised here, in the worker, as if it had run
    here.
    """
    seconds = work.deadline(settings.work_deadlines)
    raised: list[BaseException] = []

    def call() -> None:
        try:
            work.run(task, payload)
        except BaseException as exc:  # noqa: BLE001 - raised again in the worker, as if run there
            if not task.abandoned:
                raised.append(exc)
            else:
                LOG.info("abandoned %s on node %s ended: %r", work.kind, task.node.uuid, exc)

    thread = threading.Thread(
        target=call, name=f"{threading.current_thread().name}-{work.kind}", daemon=True
    )
    thread.start()
    thread.join(seconds)
    if thread.is_alive() and task.abandon(lambda: not thread.is_alive()):
        what = f"{work.kind} on node {task.node.uuid}"
        abandoned.add(thread, what, project_of(task.node.lessee, task.node.owner))
        message = (
            f"The {work.kind} request did not finish within its deadline of {seconds:g} s "
            f"(conductor.work_deadlines); the conductor stopped waiting for it"
        )
        LOG.error("%s: %s", what, message)
        return Overdue(seconds, message)
    thread.join()
    if raised:
        raise raised[0]
    return None
