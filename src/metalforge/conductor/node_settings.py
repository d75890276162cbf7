"""Work items that change one setting of a node: its console, boot mode and secure boot.

``services.node_settings`` queues them (the API has answered 202). Each
runs under the node's reservation, and is level-triggered: it reads what
the hardware has now and changes only what differs, so running it twice
is harmless. The outcome is written with the node when the reservation is
released: the new setting, or ``last_error`` and an error in the history,
as Ironic's conductor leaves a failed change (the node's provision state
is never touched).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from metalforge.conductor import history
from metalforge.conductor.task import NodeTask
from metalforge.conductor.work import NodeWork
from metalforge.config import WorkDeadlines
from metalforge.drivers.base import (
    ConsoleInterface,
    DriverError,
    ManagementInterface,
    Unsupported,
    optional_interface_of,
)

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConsoleChange:
    enabled: bool


@dataclass(frozen=True)
class BootModeChange:
    mode: str


@dataclass(frozen=True)
class SecureBootChange:
    enabled: bool


def fail(task: NodeTask, message: str) -> None:
    """A setting's change fails alone, never the node's flow."""
    task.node.last_error = message
    task.record("management", message, history.ERROR)


def _management(task: NodeTask) -> ManagementInterface:
    iface = optional_interface_of(task, ManagementInterface)
    if iface is None:
        raise Unsupported(task.node.driver, "management")
    return iface


def run_console(task: NodeTask, change: ConsoleChange) -> None:
    enabled = change.enabled
    node = task.node
    doing = "enabling" if enabled else "disabling"
    try:
        iface = optional_interface_of(task, ConsoleInterface)
        if iface is None:
            raise Unsupported(node.driver, "console")
        iface.validate(task)
        if enabled:
            iface.start_console(task)
        else:
            iface.stop_console(task)
    except DriverError as exc:
        message = f"Error {doing} the console on node {node.uuid}. Reason: {exc}"
        node.last_error = message
        task.record("console", message, history.ERROR)
        return
    node.console_enabled = enabled
    node.last_error = None
    task.record("console", f"console {'enabled' if enabled else 'disabled'}")


def run_boot_mode(task: NodeTask, change: BootModeChange) -> None:
    mode = change.mode
    try:
        iface = _management(task)
        iface.validate(task)
        try:
            current = iface.get_boot_mode(task)
        except DriverError as exc:
            LOG.warning("could not read the boot mode of node %s: %s", task.node.uuid, exc)
            current = None
        if current != mode:
            iface.set_boot_mode(task, mode)
    except DriverError as exc:
        fail(task, f"Failed to change boot mode to '{mode}': {exc}")
        return
    task.node.boot_mode = mode
    task.record("management", f"boot mode set to {mode}")


def run_secure_boot(task: NodeTask, change: SecureBootChange) -> None:
    enabled = change.enabled
    try:
        iface = _management(task)
        iface.validate(task)
        try:
            current = iface.get_secure_boot_state(task)
        except DriverError as exc:
            LOG.warning("could not read secure boot of node %s: %s", task.node.uuid, exc)
            current = None
        if current != enabled:
            iface.set_secure_boot_state(task, enabled)
    except DriverError as exc:
        fail(task, f"Failed to change secure_boot state to '{enabled}': {exc}")
        return
    task.node.secure_boot = enabled
    task.record("management", f"secure boot turned {'on' if enabled else 'off'}")


def _deadline(deadlines: WorkDeadlines) -> float:
    return deadlines.node_settings


CONSOLE: NodeWork[ConsoleChange] = NodeWork("console", ConsoleChange, run_console, fail, _deadline)
BOOT_MODE: NodeWork[BootModeChange] = NodeWork(
    "boot_mode", BootModeChange, run_boot_mode, fail, _deadline
)
SECURE_BOOT: NodeWork[SecureBootChange] = NodeWork(
    "secure_boot", SecureBootChange, run_secure_boot, fail, _deadline
)
