"""The agent ramdisk a step flow boots before its plan and stops after its last step.

Cleaning and servicing both learn an in-band interface's steps only from an
agent running on the node, so both boot the ramdisk once per flow, wait in
their wait state for its first heartbeat, plan, run, and stop it at the end.
They differ only in the deploy interface's calls (``prepare_cleaning`` or
``prepare_service``...) and in what the end leaves running: a cleaned node is
off, a serviced one boots its instance again. ``RamdiskBoot`` holds the
difference; the functions below are the shared sequence.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from metalforge import states
from metalforge.conductor import history, stepflow
from metalforge.conductor.bmc_retry import retried
from metalforge.conductor.flows.common import deploy_interface
from metalforge.conductor.task import NodeTask
from metalforge.drivers.base import DeployInterface, DriverError, StepOutcome


@dataclass(frozen=True)
class RamdiskBoot:
    """How one step flow boots and stops the ramdisk."""

    kind: stepflow.StepFlow
    purpose: str
    """What the boot is for, as messages say it (``cleaning``, ``servicing``)."""
    prepare: Callable[[DeployInterface, NodeTask], StepOutcome]
    check: Callable[[DeployInterface, NodeTask], StepOutcome]
    tear_down: Callable[[DeployInterface, NodeTask], None]
    """Stop the ramdisk (an abort while it boots; the end, unless ``end`` is given)."""
    timeout: Callable[[NodeTask], float]
    """Seconds the ramdisk may take to come up (the flow's wait bound)."""
    end: Callable[[DeployInterface, NodeTask], None] | None = None
    """After the last step succeeded, if it differs from ``tear_down`` (cleaning may
    leave the agent running for the next flow)."""


def ready(task: NodeTask, boot: RamdiskBoot) -> bool:
    """Boot the ramdisk once per flow; ``True`` when the plan can be made now.

    With ``without_ramdisk`` nothing boots. When the ramdisk must boot
    first, the node waits in the flow's wait state and ``check_ready`` is
    called from there until the agent is up.
    """
    progress = task.progress
    if progress.ramdisk_prepared or progress.without_ramdisk:
        return True
    try:
        iface = deploy_interface(task)
        outcome = retried(task, f"boot for {boot.purpose}", lambda: boot.prepare(iface, task))
    except DriverError as exc:
        _failed_to_prepare(task, boot, exc)
        return False
    if outcome == "done":
        task.progress = dataclasses.replace(task.progress, ramdisk_prepared=True)
        return True
    task.progress = dataclasses.replace(task.progress, ramdisk_booting_since=task.now())
    stepflow.schedule_poll(task, task.ctx.settings.async_poll_interval)
    task.transition(states.WAIT, note="waiting for the ramdisk agent to come up")
    return False


def check_ready(task: NodeTask, boot: RamdiskBoot) -> None:
    """The wait state before any plan exists: is the ramdisk agent up yet?"""
    try:
        outcome = boot.check(deploy_interface(task), task)
    except DriverError as exc:
        _failed_to_prepare(task, boot, exc)
        return
    if outcome == "wait":
        since = task.progress.ramdisk_booting_since
        if since is None:
            since = task.now()
        timeout = boot.timeout(task)
        if task.now() - since > timeout:
            booted = dt.datetime.fromtimestamp(since, dt.UTC).isoformat(timespec="seconds")
            stepflow.fail(
                task,
                boot.kind,
                f"the ramdisk agent did not come up within {timeout:.0f}s of booting the node "
                f"(at {booted}): no heartbeat",
            )
            return
        stepflow.schedule_poll(task, task.ctx.settings.async_poll_interval)
        return
    task.progress = dataclasses.replace(
        task.progress, ramdisk_booting_since=None, ramdisk_prepared=True
    )
    task.transition(states.RESUME, note="the ramdisk agent is up")


def finish(task: NodeTask, boot: RamdiskBoot) -> None:
    """After the last step: stop the ramdisk the flow booted (nothing if none was)."""
    if task.progress.ramdisk_prepared:
        end = boot.end or boot.tear_down
        end(deploy_interface(task), task)


def tear_down(task: NodeTask, boot: RamdiskBoot) -> None:
    """Stop the ramdisk (raises ``DriverError``)."""
    boot.tear_down(deploy_interface(task), task)


def stop_while_booting(task: NodeTask, boot: RamdiskBoot) -> None:
    """Aborted before any step: a ramdisk still booting runs nothing yet, so stop it."""
    if task.progress.ramdisk_booting_since is None:
        return
    try:
        boot.tear_down(deploy_interface(task), task)
    except DriverError as exc:
        task.record(
            f"{boot.kind.name}_abort", f"could not stop the ramdisk: {exc}", history.WARNING
        )


def _failed_to_prepare(task: NodeTask, boot: RamdiskBoot, exc: DriverError) -> None:
    stepflow.fail(task, boot.kind, f"Failed to prepare the node for {boot.purpose}: {exc}")
