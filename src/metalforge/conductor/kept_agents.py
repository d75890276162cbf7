"""Powering off the agents fast track kept running and no flow used.

An inspection or a cleaning that keeps its agent (``drivers.agent.fast_track``)
queues, in the same write, an ``agent_idle`` item due ``fast_track_timeout``
seconds later (``db.agent_sessions.IdleCheck``). Run under the node's
reservation, the item powers the node off and ends the agent's session if
the agent is still the one kept at that time and its node rests in a stable
state. A flow that used the agent meanwhile kept it again (a later time,
with an item of its own) or ended it; a node in a flow is left to it. A node
in maintenance, or whose BMC failed the power-off, is looked at again a
timeout later.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from metalforge import states
from metalforge.conductor import history
from metalforge.conductor.flows.common import power
from metalforge.conductor.task import NodeTask
from metalforge.conductor.work import NodeWork
from metalforge.db import queue
from metalforge.db.agent_sessions import IdleCheck
from metalforge.db.engine import now_for
from metalforge.drivers.base import POWER_OFF, DriverError, set_info, switch_power

IDLE_STATES = frozenset({states.MANAGEABLE, states.AVAILABLE})
"""Where a flow that kept its agent leaves the node (inspection, cleaning)."""


def run(task: NodeTask, check: IdleCheck) -> None:
    """Power the node off if its agent is still the one kept at ``check.kept_since``."""
    session = task.agent_session()
    if session is None or session.kept_since is None:
        return  # used and ended, or never kept
    if session.kept_since.isoformat() != check.kept_since:
        return  # kept again since; that keep queued its own check
    node = task.node
    if node.provision_state not in IDLE_STATES:
        return  # a flow uses the agent; its end keeps it again or stops it
    if node.maintenance:
        _look_again(task, check)
        return
    try:
        switch_power(task, power(task), POWER_OFF)
    except DriverError as exc:
        task.record("agent", f"could not power off the idle kept agent: {exc}", history.WARNING)
        _look_again(task, check)
        return
    node.power_state = POWER_OFF
    task.end_agent_session()
    set_info(task, agent_url=None, agent_version=None, agent_last_heartbeat=None)
    idle = task.settings.fast_track_timeout
    task.record("agent", f"the kept agent was unused for {idle:.0f}s; the node is powered off")


def _look_again(task: NodeTask, check: IdleCheck) -> None:
    """The same check, a timeout from now."""
    node_id, host = task.node.id, task.ctx.hostname
    after = dt.timedelta(seconds=task.settings.fast_track_timeout)
    task.write_fenced(
        lambda session: queue.enqueue(
            session,
            queue.AGENT_IDLE,
            node_id,
            dataclasses.asdict(check),
            preferred_owner=host,
            not_before=now_for(session) + after,
        )
    )


def _gave_up(task: NodeTask, message: str) -> None:
    task.record("agent", f"the idle kept agent was not powered off: {message}", history.WARNING)


IDLE: NodeWork[IdleCheck] = NodeWork(
    queue.AGENT_IDLE, IdleCheck, run, _gave_up, lambda deadlines: deadlines.power
)
"""Power off a kept agent nobody used (``fast_track_timeout``)."""
