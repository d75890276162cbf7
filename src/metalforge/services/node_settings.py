"""Console, boot mode and secure boot requests: checked now, carried out by a conductor.

Ironic answers these 202 and changes the hardware in a conductor's worker,
so does metalforge, the way power requests go: the request is checked in a
write transaction (the node visible, unreserved, its interface able to do
it, for the boot mode and secure boot not in the middle of a flow), the
old ``last_error`` is cleared and a work item is queued for the node's
conductor in the same transaction. The conductor acts under the node's
reservation and records the result with it (``console_enabled``,
``boot_mode``, ``secure_boot``), or a failure as ``last_error`` and history,
which is where Ironic leaves it too. Queued rather than done under an API
hold because starting a console or switching firmware settings may take as
long as a power change, and a crash of the API process must not lose the
request once it has been answered.
"""

from __future__ import annotations

from typing import Any

from metalforge import states
from metalforge.conductor.node_settings import (
    BOOT_MODE,
    CONSOLE,
    SECURE_BOOT,
    BootModeChange,
    ConsoleChange,
    SecureBootChange,
)
from metalforge.conductor.work import NodeWork, P
from metalforge.db.models import Node
from metalforge.drivers.base import (
    ConsoleInterface,
    DriverError,
    ManagementInterface,
    NotOffered,
    ReadOnlyTask,
    Unsupported,
)
from metalforge.errors import bad_request, conflict
from metalforge.services import fencing, lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version

BOOT_MODES = ("uefi", "bios")

_TRANSITIONING = states.BUSY_STATES - states.HOLD_STATES
"""Ironic's unstable states: a flow is changing the node, so its firmware is left alone."""


def _console(svc: Services, node: Node) -> ConsoleInterface:
    try:
        return svc.drivers.interface_of(node, ConsoleInterface, "run a console")
    except NotOffered:
        raise bad_request(str(Unsupported(node.driver, "console"))) from None


def _validated(node: Node, validate: Any) -> None:
    try:
        validate(ReadOnlyTask(node))
    except DriverError as exc:
        raise bad_request(str(exc)) from None


def console_info(svc: Services, ident: str, version: Version) -> dict[str, Any] | None:
    """What the console interface says about the running console; None while it is off."""
    with svc.db.read() as session:
        node = lookup.load_node(session, ident, version)
    if not node.console_enabled:
        return None
    iface = _console(svc, node)
    try:
        task = ReadOnlyTask(node)
        iface.validate(task)
        return iface.get_console(task)
    except DriverError as exc:
        raise bad_request(str(exc)) from None


def request_console(
    svc: Services, ident: str, version: Version, enabled: bool, actor: str | None
) -> str:
    """Queue starting or stopping the console; nothing to do when it already is so."""
    with svc.db.write() as session:
        node = lookup.find_node(session, ident, version)
        _validated(node, _console(svc, node).validate)
        if node.console_enabled == enabled:
            return node.uuid
        fencing.check_unlocked(session, node)
        fencing.update_node(session, node, {"last_error": None}, race=fencing.REQUEST_RACED)
        svc.queue_for(session, node, CONSOLE, ConsoleChange(enabled))
        verb = "start" if enabled else "stop"
        fencing.record(session, node, "console", f"console {verb} requested", actor)
    svc.notify()
    return node.uuid


def _request_firmware_change(
    svc: Services,
    ident: str,
    version: Version,
    work: NodeWork[P],
    payload: P,
    note: str,
    actor: str | None,
) -> str:
    with svc.db.write() as session:
        node = lookup.find_node(session, ident, version)
        if node.provision_state in _TRANSITIONING:
            raise conflict(
                f"Node is in {node.provision_state} state. Since node is transitioning, the "
                "boot mode will not be set as this may interfere with ongoing changes and "
                "result in erroneous modification. Try again later."
            )
        fencing.check_unlocked(session, node)
        try:
            iface = svc.drivers.interface_of(node, ManagementInterface, "manage the node")
        except NotOffered:
            raise bad_request(str(Unsupported(node.driver, "management"))) from None
        _validated(node, iface.validate)
        fencing.update_node(session, node, {"last_error": None}, race=fencing.REQUEST_RACED)
        svc.queue_for(session, node, work, payload)
        fencing.record(session, node, "management", note, actor)
    svc.notify()
    return node.uuid


def request_boot_mode(
    svc: Services, ident: str, version: Version, mode: str, actor: str | None
) -> str:
    if mode not in BOOT_MODES:
        raise bad_request(
            f"Invalid boot mode {mode} requested for node. Allowed boot modes are: "
            f"{', '.join(BOOT_MODES)}"
        )
    return _request_firmware_change(
        svc, ident, version, BOOT_MODE, BootModeChange(mode), f"boot mode {mode} requested", actor
    )


def request_secure_boot(
    svc: Services, ident: str, version: Version, enabled: bool | None, actor: str | None
) -> str:
    if enabled is None:
        raise bad_request(
            "Invalid secure_boot None requested for node. Allowed secure_boot states are: "
            "True, False"
        )
    note = f"secure boot {'on' if enabled else 'off'} requested"
    return _request_firmware_change(
        svc, ident, version, SECURE_BOOT, SecureBootChange(enabled), note, actor
    )
