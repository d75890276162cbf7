"""Fast track: one boot of the agent serves an inspection, a cleaning and a deployment.

On real servers a reboot costs minutes of firmware self-test and network
boot, while the work the agent does between reboots often takes seconds.
With fast track (``conductor.fast_track``, or the node's
``driver_info/fast_track``) an inspection or a cleaning that succeeds leaves
the node on and its agent running (``keep``), and the next cleaning or
deployment uses that agent instead of booting a new one (``start``).

Whether the kept agent is still there is decided by the agent, never
guessed: it is used only while it heartbeats (or, kept moments after it
booted, before its first lookup) and the BMC says the node is on, and a kept
agent that then does not answer is replaced by a fresh boot. A kept agent
no flow used for ``fast_track_timeout`` seconds is powered off
(``conductor.kept_agents``). Failed and aborted flows never keep an agent.
"""

from __future__ import annotations

import datetime as dt

from metalforge.db.flow_progress import StepKind
from metalforge.drivers import failures
from metalforge.drivers.agent.client import AgentError
from metalforge.drivers.agent.session import (
    boot_of,
    boot_ramdisk,
    cache_steps,
    now,
    power_of,
    show,
)
from metalforge.drivers.base import (
    POWER_ON,
    DriverError,
    DriverTask,
    StepFailed,
    StepOutcome,
    set_info,
)

DRIVER_INFO_KEY = "fast_track"
"""The node's own choice, over the conductor's (Ironic's ``driver_info`` key)."""

_TRUE = frozenset({"1", "t", "true", "on", "y", "yes"})
_FALSE = frozenset({"0", "f", "false", "off", "n", "no"})


class FastTrackInvalid(DriverError):
    """``driver_info/fast_track`` is neither true nor false."""


def enabled(task: DriverTask) -> bool:
    """Whether the node keeps its agent between flows (``FastTrackInvalid`` on a bad value)."""
    value = task.node.driver_info.get(DRIVER_INFO_KEY)
    if value is None:
        return task.settings.fast_track
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise FastTrackInvalid(
        f"driver_info/{DRIVER_INFO_KEY} must be true or false, not {str(value)[:40]!r}"
    )


def keep(task: DriverTask) -> bool:
    """At the successful end of a flow: leave the agent running for the next one.

    The ramdisk's boot set-up is undone (the network boot config, inserted
    media: the running agent no longer needs them), the node stays on. ``False``
    when fast track is off or no agent session runs: the caller stops the ramdisk.
    """
    if not enabled(task) or task.agent_session() is None:
        return False
    boot_of(task).clean_up_ramdisk(task)
    if not task.keep_agent_session():
        return False
    task.record(
        "agent",
        "the agent stays up for the next flow (fast track); it is powered off after "
        f"{task.settings.fast_track_timeout:.0f}s unused",
    )
    return True


def start(task: DriverTask, kind: StepKind, purpose: str) -> StepOutcome:
    """Start the flow's agent: the kept one if it can serve (``done`` at once when it
    answers with its ``kind`` steps), else a fresh boot (``wait`` for its heartbeat)."""
    if not _reusable(task):
        boot_ramdisk(task, purpose)
        return "wait"
    set_info(task, agent_command=None)
    failures.agent_started(task.node.provision_state, "kept")
    task.record("agent", f"using the agent kept running for {purpose} (fast track): no reboot")
    return agent_ready(task, kind, purpose)


def _reusable(task: DriverTask) -> bool:
    if not enabled(task):
        return False
    session = task.agent_session()
    if session is None or session.kept_since is None:
        return False
    current = now()
    idle = (current - session.kept_since).total_seconds()
    if idle > task.settings.fast_track_timeout:
        return False  # its power-off is due
    silent = _silence(session.last_heartbeat_at, session.kept_since, current)
    if silent > task.settings.agent_heartbeat_timeout:
        return False
    return power_of(task).get_power_state(task) == POWER_ON


def _silence(last_heartbeat: dt.datetime | None, kept_since: dt.datetime, at: dt.datetime) -> float:
    """Seconds the agent has been quiet: since its last heartbeat, or since it was kept
    (an agent kept right after its inspection report may not have looked up yet)."""
    return (at - (last_heartbeat or kept_since)).total_seconds()


def agent_ready(task: DriverTask, kind: StepKind, purpose: str) -> StepOutcome:
    """While the flow waits for its agent: its ``kind`` steps once it is up.

    A kept agent that stays silent past the heartbeat timeout, or that does
    not answer, is replaced by a fresh boot (the flow waits on); an agent
    booted for this flow that fails here fails the flow.
    """
    session = task.agent_session()
    show(task, session)
    kept = session is not None and session.kept_since is not None
    if session is None or not session.heard_since_boot:
        if kept and session is not None and session.kept_since is not None:
            silent = _silence(session.last_heartbeat_at, session.kept_since, now())
            if silent > task.settings.agent_heartbeat_timeout:
                _replace(task, purpose, f"it did not heartbeat for {silent:.0f}s")
        return "wait"
    try:
        cache_steps(task, kind)
    except (AgentError, StepFailed) as exc:
        if not kept:
            raise
        _replace(task, purpose, str(exc))
        return "wait"
    return "done"


def _replace(task: DriverTask, purpose: str, why: str) -> None:
    task.record("agent", f"the kept agent cannot serve ({why}); booting a new one", "WARNING")
    boot_ramdisk(task, purpose)
