"""``redfish`` BIOS: settings and factory reset through the system's Bios resource.

Both are clean steps (out of band, so no ramdisk) and deploy steps, at
priority 0: they run only when asked for, by manual cleaning or a deploy
template.

A setting is refused (``StepFailed``) before anything is sent when it is not
a ``{name, value}`` object or when the BMC does not list the attribute; a
value the BMC rejects fails the step with the BMC's message.

Many BMCs stage new values and apply them at the next boot. After the step,
``driver_internal_info.bios_settings`` holds the attributes the BMC reports as
current, and ``bios_settings_pending`` those asked for but not current yet
(absent when everything took effect at once, as on sushy-emulator).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sushy import exceptions as sushy_errors

from metalforge.drivers.base import BiosInterface, DriverTask, StepFailed
from metalforge.drivers.redfish import connection
from metalforge.drivers.step_declarations import clean_step, deploy_step

_SETTINGS_ARGS = {
    "settings": {
        "description": 'BIOS settings as a list of {"name": ..., "value": ...} objects.',
        "required": True,
    }
}


def _requested(settings: Any) -> dict[str, Any]:
    if not isinstance(settings, list) or not all(
        isinstance(item, dict) and set(item) >= {"name", "value"} for item in settings
    ):
        raise StepFailed(
            f"invalid argument settings: {settings!r} is not a list of {{name, value}} objects"
        )
    if not settings:
        raise StepFailed("invalid argument settings: the list is empty")
    return {str(item["name"]): item["value"] for item in settings}


def _record(task: DriverTask, current: Mapping[str, Any], pending: Mapping[str, Any]) -> None:
    info = dict(task.node.driver_internal_info)
    info["bios_settings"] = dict(current)
    if pending:
        info["bios_settings_pending"] = dict(pending)
    else:
        info.pop("bios_settings_pending", None)
    task.node.driver_internal_info = info


class RedfishBios(BiosInterface):
    """BIOS attributes through Redfish ``Bios`` and its settings object."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    @clean_step(priority=0, argsinfo=_SETTINGS_ARGS, requires_ramdisk=False)
    @deploy_step(priority=0, argsinfo=_SETTINGS_ARGS)
    def apply_configuration(self, task: DriverTask, settings: list[dict[str, Any]]) -> None:
        """Set BIOS attributes; those the BMC stages for the next boot are reported pending."""
        wanted = _requested(settings)
        with connection.system(task, "apply BIOS settings") as system:
            bios = system.bios
            known = bios.attributes or {}
            unknown = sorted(set(wanted) - set(known))
            if unknown:
                raise StepFailed(
                    f"BIOS setting(s) {', '.join(unknown)} are not known to the node's BMC; "
                    f"it knows {', '.join(sorted(known)) or 'none'}"
                )
            try:
                bios.set_attributes(wanted)
            except sushy_errors.BadRequestError as exc:
                raise StepFailed(
                    f"the node's BMC refused BIOS settings {wanted}: {exc.detail or exc}"
                ) from None
            bios.refresh()
            current = dict(bios.attributes or {})
        pending = {name: value for name, value in wanted.items() if current.get(name) != value}
        _record(task, current, pending)
        task.record("bios", f"BIOS settings applied: {wanted}")

    @clean_step(priority=0, requires_ramdisk=False)
    @deploy_step(priority=0)
    def factory_reset(self, task: DriverTask) -> None:
        """Return the BIOS attributes to the vendor's defaults."""
        with connection.system(task, "reset the BIOS to factory settings") as system:
            bios = system.bios
            bios.reset_bios()
            bios.refresh()
            current = dict(bios.attributes or {})
        _record(task, current, {})
        task.record("bios", "BIOS reset to factory settings")
