"""What several flows' hooks share: their interfaces and their ``fail`` transition."""

from __future__ import annotations

from typing import Literal

from metalforge import states
from metalforge.conductor import history, step_plans
from metalforge.conductor.flows.spec import Admission, Intent
from metalforge.conductor.task import NodeTask
from metalforge.db.flow_progress import NO_FLOW
from metalforge.drivers.base import (
    BiosInterface,
    DeployInterface,
    DriverError,
    FirmwareInterface,
    PowerInterface,
)


def power(task: NodeTask) -> PowerInterface:
    return task.ctx.drivers.interface_of(task.node, PowerInterface, "switch power")


def deploy_interface(task: NodeTask) -> DeployInterface:
    return task.ctx.drivers.interface_of(task.node, DeployInterface, "clean or deploy")


def read_from_bmc(task: NodeTask, family: Literal["bios", "firmware"]) -> None:
    """Read the BIOS settings (or firmware versions) while the BMC is known to answer
    (verification, the end of an inspection), so the API shows them current. A BMC that
    cannot report them fails nothing (the node's history says so); no-bios and
    no-firmware read nothing."""
    drivers = task.ctx.drivers
    what = "BIOS settings" if family == "bios" else "firmware versions"
    try:
        if family == "bios" and (bios := drivers.optional_interface_of(task.node, BiosInterface)):
            bios.cache_bios_settings(task)
        firmware = drivers.optional_interface_of(task.node, FirmwareInterface)
        if family == "firmware" and firmware is not None:
            firmware.cache_firmware_components(task)
    except DriverError as exc:
        task.record(family, f"{what} could not be read: {exc}", history.WARNING)


def fail(task: NodeTask, message: str, note: str | None = None) -> None:
    """The flow's ``fail`` transition: ``message`` in ``last_error``, ``note`` or it in history."""
    task.transition(states.FAIL, note=note or message, severity=history.ERROR, last_error=message)


def warn_unknown_overrides(
    task: NodeTask, kind: str, overrides: dict[str, int], supported: list[step_plans.Step]
) -> None:
    """Say in the node's history when a priority override names a step the node lacks.

    Start-up cannot check the names: an agent's steps are known only once it
    runs on the node. A typo would otherwise leave a step at its default
    priority without a trace.
    """
    unknown = step_plans.unknown_overrides(overrides, supported)
    if unknown:
        task.record(
            f"{kind}_plan",
            f"conductor.{kind}_step_priority_override names step(s) this node does not "
            f"offer, ignored: {', '.join(unknown)}",
            history.WARNING,
        )


def forget_progress(_admission: Admission) -> Intent:
    """The node leaves the step flows behind: nothing an earlier flow left is kept."""
    return Intent(progress=NO_FLOW)
