"""``redfish`` firmware: component versions, and updates through the BMC's UpdateService.

The versions are the system's ``BiosVersion`` (``bios``) and its manager's
``FirmwareVersion`` (``bmc``), read at verification and after each update.

``firmware.update`` (a clean step, and so a service step; out of band) asks
the UpdateService to ``SimpleUpdate`` each component in turn and waits on
the BMC's task monitor: the node waits in ``clean wait``/``service wait``
and the conductor checks the task now and then (``check_step``), so no
worker is held while a BMC flashes. A task the BMC reports failed fails the
step with the BMC's messages and the versions it reports then; a BMC that
stops answering fails it at the flow's timeout. Where the update is, is
kept in ``driver_internal_info.firmware_update`` (the updates left, the
task monitor, when a wait after an update ends), so a conductor that takes
the node over carries on from there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sushy import exceptions as sushy_errors
from sushy.resources.updateservice.constants import UpdateTransferProtocolType

from metalforge.db.firmware_components import Reported
from metalforge.drivers.base import (
    DriverTask,
    FirmwareInterface,
    StepFailed,
    StepOutcome,
    set_info,
)
from metalforge.drivers.firmware import CHECKED_UPDATE_ARGS, FirmwareUpdate, parse_settings
from metalforge.drivers.redfish import connection
from metalforge.drivers.step_declarations import clean_step, service_step

_STATE = "firmware_update"


def _text(value: Any) -> str | None:
    return None if value is None else str(value)[:255]


def _report(
    root: Any, system: Any, flashed: str | None = None, before: str | None = None
) -> list[Reported]:
    """The components' versions now (``flashed``: the component an update just wrote,
    which ran ``before`` until then)."""
    found = []
    if system.bios_version:
        found.append(
            Reported(
                "bios",
                _text(system.bios_version),
                vendor=_text(system.manufacturer),
                model=_text(system.model),
                flashed=flashed == "bios",
                before=before if flashed == "bios" else None,
            )
        )
    manager = _manager(root, system)
    if manager is not None and manager.firmware_version:
        found.append(
            Reported(
                "bmc",
                _text(manager.firmware_version),
                vendor=_text(getattr(manager, "manufacturer", None)),
                model=_text(getattr(manager, "model", None)),
                flashed=flashed == "bmc",
                before=before if flashed == "bmc" else None,
            )
        )
    return found


def _manager(root: Any, system: Any) -> Any:
    try:
        managers = system.managers
    except (sushy_errors.MissingAttributeError, AttributeError):
        managers = []
    if managers:
        return managers[0]
    try:
        return root.get_manager()
    except sushy_errors.SushyError:
        return None


def _target(root: Any, system: Any, component: str) -> str:
    if component == "bios":
        return str(system.path)
    manager = _manager(root, system)
    if manager is None:
        raise StepFailed("the BMC lists no manager to update the bmc firmware of")
    return str(manager.path)


def _state(task: DriverTask) -> dict[str, Any]:
    state = task.node.driver_internal_info.get(_STATE)
    if not isinstance(state, dict):
        raise StepFailed("the firmware update's progress was lost; run the step again")
    return dict(state)


def _keep(task: DriverTask, state: dict[str, Any] | None) -> None:
    set_info(task, **{_STATE: state})


class RedfishFirmware(FirmwareInterface):
    """Firmware versions and updates through Redfish (see the module's docstring)."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    def cache_firmware_components(self, task: DriverTask) -> None:
        with connection.root_and_system(task, "read the firmware versions") as (root, system):
            task.store_firmware(_report(root, system))

    @clean_step(priority=0, argsinfo=CHECKED_UPDATE_ARGS, requires_ramdisk=False, asynchronous=True)
    @service_step(argsinfo=CHECKED_UPDATE_ARGS, requires_ramdisk=False, asynchronous=True)
    def update(self, task: DriverTask, settings: list[dict[str, Any]]) -> StepOutcome:
        """Flash each component in turn from its URL through the BMC's UpdateService."""
        updates = parse_settings(settings)
        _keep(task, {"left": [dataclasses.asdict(u) for u in updates]})
        return self._next(task)

    def check_step(self, task: DriverTask, method: str) -> StepOutcome:
        if method != "update":
            return "done"
        state = _state(task)
        if state.get("wait_until") is not None:
            if task.now() < float(state["wait_until"]):
                return "wait"
            _keep(task, {"left": state.get("left", [])})
            return self._next(task)
        return self._check_task(task, state)

    def _next(self, task: DriverTask) -> StepOutcome:
        state = _state(task)
        left = list(state.get("left", []))
        if not left:
            _keep(task, None)
            return "done"
        update = FirmwareUpdate(**left.pop(0))
        doing = f"update the {update.component} firmware from {update.url}"
        with connection.root_and_system(task, doing) as (root, system):
            service = root.get_update_service()
            protocol = "HTTPS" if update.url.startswith("https:") else "HTTP"
            monitor = service.simple_update(
                update.url,
                targets=[_target(root, system, update.component)],
                transfer_protocol=UpdateTransferProtocolType(protocol),
            )
            before = _report(root, system)
        versions = {r.component: r.current_version for r in before}
        task.record(
            "firmware",
            f"{update.component} firmware update started from {update.url} "
            f"(running {versions.get(update.component) or 'an unknown version'})",
        )
        _keep(
            task,
            {
                "left": left,
                "current": dataclasses.asdict(update),
                "monitor": monitor.task_monitor_uri,
                "before": versions.get(update.component),
            },
        )
        return "wait"

    def _check_task(self, task: DriverTask, state: dict[str, Any]) -> StepOutcome:
        update = FirmwareUpdate(**state["current"])
        with connection.root_and_system(task, "check the firmware update") as (root, system):
            monitor = root.get_task_monitor(state["monitor"])
            if monitor.is_processing:
                return "wait"
            problem = connection.task_failure(monitor)
            system.refresh()
            after = _report(
                root,
                system,
                flashed=None if problem else update.component,
                before=state.get("before"),
            )
        task.store_firmware(after)
        versions = {r.component: r.current_version for r in after}
        if problem:
            _keep(task, None)
            raise StepFailed(
                f"the BMC failed the {update.component} firmware update from {update.url}: "
                f"{problem}; it reports {update.component} "
                f"{versions.get(update.component) or 'without a version'}"
            )
        task.record(
            "firmware",
            f"{update.component} firmware updated: now {versions.get(update.component)}",
        )
        if update.wait:
            _keep(task, {"left": state.get("left", []), "wait_until": task.now() + update.wait})
            return "wait"
        _keep(task, {"left": state.get("left", [])})
        return self._next(task)
