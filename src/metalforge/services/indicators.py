"""A node's indicators (LEDs), through its management interface, as Ironic serves them.

An indicator is named ``<id>@<component>`` (``led@system``), the identifier
Ironic's API builds from the driver's ``{component: {id: ...}}`` map. Reads
take no reservation (like the boot device's); setting one holds the node
for the BMC call, as ``management.set_boot_device`` does. Ironic gates none
of these by microversion, so neither does metalforge.
"""

from __future__ import annotations

from dataclasses import dataclass

from metalforge.drivers.base import INDICATOR_STATES, DriverError, ReadOnlyTask, Unsupported
from metalforge.errors import RequestError, bad_request
from metalforge.services import management
from metalforge.services.context import Services
from metalforge.services.microversion import Version


@dataclass(frozen=True)
class IndicatorView:
    name: str
    """``<id>@<component>``."""
    component: str
    readonly: bool
    states: list[str]


def split_name(unique_name: str) -> tuple[str, str]:
    """``led@system`` -> (``system``, ``led``); 400 in Ironic's words without an ``@``."""
    indicator, at, component = unique_name.rpartition("@")
    if not at:
        raise bad_request(f'Malformed indicator name "{unique_name}"')
    if not indicator or not component:
        raise bad_request(f'Missing indicator name "{unique_name}"')
    return component, indicator


def _failure(node_uuid: str, doing: str, exc: DriverError) -> RequestError:
    if isinstance(exc, Unsupported):
        return bad_request(str(exc))
    return bad_request(f"Failed to {doing} for node {node_uuid}: {exc}")


def list_indicators(svc: Services, ident: str, version: Version) -> list[IndicatorView]:
    node = management.load_node(svc, ident, version)
    iface = management.interface_of(svc, node)
    task = ReadOnlyTask(node)
    try:
        iface.validate(task)
        found = iface.get_supported_indicators(task)
    except DriverError as exc:
        raise _failure(node.uuid, "list the indicators", exc) from None
    return [
        IndicatorView(f"{name}@{component}", component, spec.readonly, list(spec.states))
        for component, names in found.items()
        for name, spec in names.items()
    ]


def indicator_state(svc: Services, ident: str, version: Version, unique_name: str) -> str:
    component, indicator = split_name(unique_name)
    node = management.load_node(svc, ident, version)
    iface = management.interface_of(svc, node)
    task = ReadOnlyTask(node)
    try:
        iface.validate(task)
        return iface.get_indicator_state(task, component, indicator)
    except DriverError as exc:
        raise _failure(node.uuid, f"read indicator {unique_name}", exc) from None


def set_indicator_state(
    svc: Services, ident: str, version: Version, unique_name: str, state: str
) -> None:
    """Set the indicator under an API hold; ``state`` is matched without regard to case."""
    component, indicator = split_name(unique_name)
    wanted = state.lower()
    if wanted not in INDICATOR_STATES:
        raise bad_request(
            f"Invalid indicator state {state!r}; valid states are {', '.join(INDICATOR_STATES)}"
        )
    doing = f"indicator {unique_name} was being set"
    purpose = f"set indicator {unique_name} to {wanted}"
    with management.held(svc, ident, version, purpose, doing) as (task, iface):
        iface.set_indicator_state(task, component, indicator, wanted)
        task.record("management", f"indicator {unique_name} set to {wanted}")
