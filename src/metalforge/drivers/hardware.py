"""Hardware types and the registry that resolves a node's interfaces.

A hardware type lists, per interface family, the implementation names it
supports; the first is the default. The registry is built once from the
conductor's ``enabled_hardware_types`` and passed around; building it checks
every step declaration (two steps of one interface with the same non-zero
priority stop start-up with both names).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from metalforge.db.flow_progress import StepKind
from metalforge.db.models import INTERFACES, Node
from metalforge.drivers.base import AnyInterface, Interface, offered
from metalforge.errors import RequestError


class UnknownDriver(RequestError, LookupError):
    """The named hardware type or interface is not enabled.

    A request naming one is refused with 400 wherever it is found out (a
    provision check, a RAID target, the step catalogue), without each place
    translating it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(400, message)


@dataclass(frozen=True)
class HardwareType:
    """A named composition of interface implementations."""

    name: str
    supported: Mapping[str, tuple[type[Interface], ...]]
    """Per interface family, the implementations allowed; the first is the default."""
    check_settings: Callable[[Mapping[str, Any]], None] | None = None
    """Refuses (``DriverError``) a ``driver_info`` setting that is present but of the wrong
    type or out of range, at enroll and PATCH; what is missing is ``validate``'s to say."""

    def default(self, family: str) -> type[Interface]:
        return self.supported[family][0]

    def names(self, family: str) -> list[str]:
        return [impl.name for impl in self.supported[family]]


class ConflictingSteps(ValueError):
    """Two steps of one interface share a non-zero priority, so their order is undefined."""


def _check_steps(impl: type[Interface], overrides: Mapping[str, Mapping[str, int]]) -> None:
    """Two enabled steps of one interface and kind may not share a priority.

    The order between them would be undefined. Checked with the operator's
    priority overrides applied (``overrides[kind]["interface.step"]``), so a
    tie an override creates stops the service at start-up, naming both steps.
    """
    for kind in get_args(StepKind):
        changed = overrides.get(kind, {})
        seen: dict[int, str] = {}
        for decl in impl.steps():
            if decl.kind != kind:
                continue
            name = f"{impl.interface_type}.{decl.method}"
            priority = changed.get(name, decl.priority)
            if priority == 0:
                continue
            other = seen.get(priority)
            if other is not None:
                source = " (after the operator's priority overrides)" if changed else ""
                raise ConflictingSteps(
                    f"{impl.interface_type} interface {impl.name!r}: {kind} steps "
                    f"{other} and {name} both have priority {priority}{source}"
                )
            seen[priority] = name


class DriverRegistry:
    """The hardware types one service can drive, by name."""

    def __init__(
        self,
        hardware_types: Iterable[HardwareType],
        step_priority_overrides: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        """``step_priority_overrides``: per step kind, ``{"interface.step": priority}``."""
        self.types = {hw.name: hw for hw in hardware_types}
        self._instances: dict[type[Interface], Interface] = {}
        for hw in self.types.values():
            missing = [family for family in INTERFACES if family not in hw.supported]
            if missing:
                raise ValueError(f"hardware type {hw.name} does not define {missing}")
            for impls in hw.supported.values():
                for impl in impls:
                    _check_steps(impl, step_priority_overrides or {})
                    self._instances.setdefault(impl, impl())

    def hardware_type(self, name: str) -> HardwareType:
        try:
            return self.types[name]
        except KeyError:
            raise UnknownDriver(f"hardware type {name!r} is not enabled") from None

    def resolve_interface_names(
        self, driver: str, requested: Mapping[str, str | None]
    ) -> dict[str, str]:
        """Interface implementation names for a node, filling in defaults; checks support."""
        hw = self.hardware_type(driver)
        chosen: dict[str, str] = {}
        for family in INTERFACES:
            name = requested.get(family)
            if name is None:
                name = hw.default(family).name
            elif name not in hw.names(family):
                raise UnknownDriver(
                    f"Could not find a suitable {family} interface {name!r} for hardware type "
                    f"{driver!r}; supported: {', '.join(hw.names(family))}"
                )
            chosen[family] = name
        return chosen

    def default_interface_of(self, driver: str, kind: type[AnyInterface]) -> AnyInterface | None:
        """The hardware type's default implementation of ``kind``'s family (what driver-level
        calls use: the driver's vendor methods, its RAID properties), or ``None`` when it
        is not one (a no-op implementation)."""
        iface = self._instances[self.hardware_type(driver).default(kind.interface_type)]
        return iface if isinstance(iface, kind) else None

    def _interface(self, node: Node, family: str) -> Interface:
        """The implementation of ``family`` the node is configured to use."""
        hw = self.hardware_type(node.driver)
        wanted = getattr(node, f"{family}_interface") or hw.default(family).name
        for impl in hw.supported[family]:
            if impl.name == wanted:
                return self._instances[impl]
        raise UnknownDriver(f"{family} interface {wanted!r} is not supported by {node.driver}")

    def interface_of(self, node: Node, kind: type[AnyInterface], doing: str) -> AnyInterface:
        """The node's implementation of ``kind``'s family, typed; ``NotOffered`` (a
        ``DriverError``) when the node's choice cannot do ``doing``."""
        return offered(self._interface(node, kind.interface_type), kind, doing)

    def optional_interface_of(self, node: Node, kind: type[AnyInterface]) -> AnyInterface | None:
        """The node's implementation of ``kind``'s family, typed, or ``None`` when the
        node's choice is not one (a no-op implementation)."""
        iface = self._interface(node, kind.interface_type)
        return iface if isinstance(iface, kind) else None

    def family(self, node: Node, family: str) -> Interface:
        """The node's implementation of ``family``, untyped: for what treats every family
        alike (validation, step listing); a caller that uses one family's calls asks
        ``interface_of`` instead."""
        return self._interface(node, family)

    def interfaces(self, node: Node) -> dict[str, Interface]:
        return {family: self._interface(node, family) for family in INTERFACES}
