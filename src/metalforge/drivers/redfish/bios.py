"""``redfish`` BIOS: settings and factory reset through the system's Bios resource.

Both are clean steps (out of band, so no ramdisk) and deploy steps, at
priority 0: they run only when asked for, by manual cleaning or a deploy
template.

A setting is refused (``StepFailed``) before anything is sent when it is not
a ``{name, value}`` object, when the BMC does not list the attribute, or
when the BMC's attribute registry refuses the value (read-only, not one of
an enumeration's values, out of an integer's bounds, a string of the wrong
length); a value the BMC rejects fails the step with the BMC's message.

After each step, and when the node is verified, the attributes the BMC
reports are stored as the node's BIOS settings (``GET /v1/nodes/{id}/bios``)
with the registry's rules for each. Many BMCs stage new values and apply
them at the next boot: ``driver_internal_info.bios_settings_pending`` holds
those asked for but not current yet (absent when everything took effect at
once, as on sushy-emulator).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sushy import exceptions as sushy_errors

from metalforge.db import bios_settings
from metalforge.drivers.base import BiosInterface, DriverTask, StepFailed, set_info
from metalforge.drivers.redfish import connection
from metalforge.drivers.step_declarations import clean_step, deploy_step, service_step

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


MAX_SETTINGS = 4096
"""More attributes than any BIOS has: a BMC that lists more is cut off (and history says so)."""
MAX_VALUE = 4096
"""The longest value kept; longer ones are cut, so a BMC cannot fill the database."""
_TEXT = 255


def _text(value: Any, limit: int = _TEXT) -> str | None:
    return None if value is None else str(value)[:limit]


def _number(value: Any) -> int | None:
    """An integer bound from the registry; anything else (a boolean, a string) is unknown."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _allowed(values: Any) -> tuple[str, ...] | None:
    """An enumeration's ``ValueName`` list, as Ironic shows it."""
    if not isinstance(values, list):
        return None
    names = [v.get("ValueName") for v in values if isinstance(v, dict)]
    return tuple(str(n)[:_TEXT] for n in names if n is not None)


def _setting(name: str, value: Any, entry: Any) -> bios_settings.Setting:
    if entry is None:
        return bios_settings.Setting(name=name, value=_text(value, MAX_VALUE))
    return bios_settings.Setting(
        name=name,
        value=_text(value, MAX_VALUE),
        attribute_type=_text(entry.attribute_type),
        allowable_values=_allowed(entry.allowable_values),
        lower_bound=_number(entry.lower_bound),
        max_length=_number(entry.max_length),
        min_length=_number(entry.min_length),
        read_only=_flag(entry.read_only),
        reset_required=_flag(entry.reset_required),
        unique=_flag(entry.unique),
        upper_bound=_number(entry.upper_bound),
    )


def _registry(bios: Any) -> dict[str, Any]:
    """The BMC's attribute registry by attribute name; none if it publishes none."""
    try:
        registry = bios.get_attribute_registry()
    except (sushy_errors.SushyError, AttributeError, KeyError, TypeError):
        return {}
    entries = getattr(getattr(registry, "registry_entries", None), "attributes", None) or []
    return {e.name: e for e in entries if isinstance(getattr(e, "name", None), str)}


def _violation(name: str, value: Any, entry: Any) -> str | None:  # noqa: PLR0911 - a table
    """Why the registry refuses ``value`` for ``name``; none if it does not (or is silent)."""
    if entry is None:
        return None
    kind = entry.attribute_type
    if _flag(entry.read_only) or _flag(entry.immutable):
        return f"{name} is read-only"
    allowed = _allowed(entry.allowable_values)
    if kind == "Enumeration" and allowed and value not in allowed:
        return f"{name} must be one of {', '.join(allowed)}, not {value!r}"
    if kind == "Integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{name} must be an integer, not {value!r}"
        low, high = _number(entry.lower_bound), _number(entry.upper_bound)
        if (low is not None and value < low) or (high is not None and value > high):
            return f"{name} must be from {low} to {high}, not {value}"
    if kind == "Boolean" and not isinstance(value, bool):
        return f"{name} must be true or false, not {value!r}"
    if kind == "String":
        if not isinstance(value, str):
            return f"{name} must be a string, not {value!r}"
        shortest, longest = _number(entry.min_length), _number(entry.max_length)
        if (shortest is not None and len(value) < shortest) or (
            longest is not None and len(value) > longest
        ):
            return f"{name} must be {shortest} to {longest} characters long"
    return None


def _store(task: DriverTask, bios: Any) -> dict[str, Any]:
    """Keep what the BMC reports now, with its registry's rules; returns the attributes."""
    attributes = dict(bios.attributes or {})
    registry = _registry(bios)
    names = sorted(n for n in attributes if isinstance(n, str) and 0 < len(n) <= _TEXT)
    if len(names) > MAX_SETTINGS:
        task.record(
            "bios", f"the BMC lists {len(names)} BIOS attributes; only {MAX_SETTINGS} are kept"
        )
        names = names[:MAX_SETTINGS]
    task.store_bios_settings([_setting(n, attributes[n], registry.get(n)) for n in names])
    return attributes


def _note_pending(task: DriverTask, pending: Mapping[str, Any]) -> None:
    set_info(task, bios_settings_pending=dict(pending) or None)


class RedfishBios(BiosInterface):
    """BIOS attributes through Redfish ``Bios`` and its settings object."""

    name = "redfish"

    def validate(self, task: DriverTask) -> None:
        connection.parse_driver_info(task.node.driver_info)

    def properties(self) -> dict[str, str]:
        return dict(connection.PROPERTIES)

    @clean_step(priority=0, argsinfo=_SETTINGS_ARGS, requires_ramdisk=False)
    @service_step(argsinfo=_SETTINGS_ARGS, requires_ramdisk=False)
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
            registry = _registry(bios)
            problems = [
                p for n, v in sorted(wanted.items()) if (p := _violation(n, v, registry.get(n)))
            ]
            if problems:
                raise StepFailed(
                    f"BIOS settings refused by the BMC's attribute registry: {'; '.join(problems)}"
                )
            try:
                bios.set_attributes(wanted)
            except sushy_errors.BadRequestError as exc:
                raise StepFailed(
                    f"the node's BMC refused BIOS settings {wanted}: {exc.detail or exc}"
                ) from None
            bios.refresh()
            current = _store(task, bios)
        pending = {name: value for name, value in wanted.items() if current.get(name) != value}
        _note_pending(task, pending)
        task.record("bios", f"BIOS settings applied: {wanted}")

    @clean_step(priority=0, requires_ramdisk=False)
    @service_step(requires_ramdisk=False)
    @deploy_step(priority=0)
    def factory_reset(self, task: DriverTask) -> None:
        """Return the BIOS attributes to the vendor's defaults."""
        with connection.system(task, "reset the BIOS to factory settings") as system:
            bios = system.bios
            bios.reset_bios()
            bios.refresh()
            _store(task, bios)
        _note_pending(task, {})
        task.record("bios", "BIOS reset to factory settings")

    def cache_bios_settings(self, task: DriverTask) -> None:
        with connection.system(task, "read the BIOS settings") as system:
            _store(task, system.bios)
