"""Step metadata: what ``@clean_step``, ``@deploy_step`` and ``@service_step`` record.

The decorators only attach a frozen ``StepDecl`` to the method; nothing is
read from configuration and nothing runs at import time. Interfaces collect
their declarations when a driver registry is built, and the conductor's step
engine applies operator overrides on top.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from metalforge.db.flow_progress import StepKind

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ArgInfo:
    """One argument a step accepts."""

    description: str
    required: bool = False
    check: Callable[[Any], object] | None = None
    """Raises (``ValueError`` or a driver error, with the reason) for a value the step
    cannot take: called when the step is requested, so the request is refused (400)
    before the node moves."""


@dataclass(frozen=True, slots=True)
class StepDecl:
    """A step as its driver declares it (before operator overrides)."""

    kind: StepKind
    method: str
    priority: int
    abortable: bool = False
    argsinfo: Mapping[str, ArgInfo] = field(default_factory=dict)
    requires_ramdisk: bool = True
    asynchronous: bool = False
    """The step starts work elsewhere and the node waits in a wait state until it ends."""
    in_band: bool = False
    """One of the ramdisk agent's steps (reported by it), not the interface's own."""


_ATTR = "_metalforge_steps"


def _record(decl: StepDecl) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        existing: tuple[StepDecl, ...] = getattr(func, _ATTR, ())
        setattr(func, _ATTR, (*existing, decl))
        return func

    return decorate


def parse_argsinfo(argsinfo: Mapping[str, Mapping[str, Any]] | None) -> dict[str, ArgInfo]:
    return {
        name: ArgInfo(
            str(info.get("description", "")),
            bool(info.get("required", False)),
            # Only a driver's own declaration carries a check: JSON (an agent's list) cannot.
            check if callable(check := info.get("check")) else None,
        )
        for name, info in (argsinfo or {}).items()
    }


def clean_step(
    priority: int,
    abortable: bool = False,
    argsinfo: Mapping[str, Mapping[str, Any]] | None = None,
    requires_ramdisk: bool = True,
    asynchronous: bool = False,
) -> Callable[[F], F]:
    """Declare an interface method as a clean step with a default priority."""
    return _record(
        StepDecl(
            "clean",
            "",
            priority,
            abortable,
            parse_argsinfo(argsinfo),
            requires_ramdisk,
            asynchronous,
        )
    )


def deploy_step(
    priority: int,
    argsinfo: Mapping[str, Mapping[str, Any]] | None = None,
    asynchronous: bool = False,
) -> Callable[[F], F]:
    """Declare an interface method as a deploy step with a default priority."""
    return _record(
        StepDecl("deploy", "", priority, False, parse_argsinfo(argsinfo), True, asynchronous)
    )


def service_step(
    priority: int = 0,
    abortable: bool = False,
    argsinfo: Mapping[str, Mapping[str, Any]] | None = None,
    requires_ramdisk: bool = True,
    asynchronous: bool = False,
) -> Callable[[F], F]:
    """Declare an interface method as a service step: a step an operator may run on a
    deployed node (``service``) without disturbing its instance. Service steps only run
    when asked for; the priority orders a runbook's ties, as Ironic keeps it."""
    return _record(
        StepDecl(
            "service",
            "",
            priority,
            abortable,
            parse_argsinfo(argsinfo),
            requires_ramdisk,
            asynchronous,
        )
    )


def declared_steps(cls: type) -> list[StepDecl]:
    """Every step ``cls`` declares, with ``method`` filled in, in name order."""
    return list(_declared_steps(cls))


@functools.cache
def _declared_steps(cls: type) -> tuple[StepDecl, ...]:
    # Declarations are fixed when the class is created, and scanning dir() on
    # every step a flow runs costs more than the step's database write.
    found: list[StepDecl] = []
    for name in sorted(dir(cls)):
        member = getattr(cls, name, None)
        for decl in getattr(member, _ATTR, ()):
            found.append(
                StepDecl(
                    decl.kind,
                    name,
                    decl.priority,
                    decl.abortable,
                    decl.argsinfo,
                    decl.requires_ramdisk,
                    decl.asynchronous,
                )
            )
    return tuple(found)
