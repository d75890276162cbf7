"""Collecting, ordering and validating steps; cleaning and deploying share it.

A step is identified by ``interface.step``. The order of a plan is priority,
highest first; ties between interfaces are broken by ``INTERFACE_ORDER``.
Operators override default priorities in configuration
(``["deploy.erase_devices:0", "raid.create_configuration:20"]``); priority 0
keeps a step out of automated plans, while manual requests may still name it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from metalforge.db.flow_progress import NO_FLOW, FlowProgress, StepKind
from metalforge.db.models import Node
from metalforge.drivers.base import DriverError, Interface, ReadOnlyTask, StepsNotKnown
from metalforge.drivers.hardware import DriverRegistry
from metalforge.drivers.step_declarations import ArgInfo, StepDecl

INTERFACE_ORDER = ("power", "management", "deploy", "bios", "raid", "firmware", "vendor")
"""Tie-break between interfaces for steps of equal priority (earlier runs first)."""


class StepRequestError(ValueError):
    """A requested step list names a step, interface or argument that does not exist."""


@dataclass(frozen=True, slots=True)
class Step:
    """A step as the engine runs it: declaration, effective priority and arguments."""

    interface: str
    step: str
    priority: int
    args: Mapping[str, Any] = field(default_factory=dict)
    abortable: bool = False
    requires_ramdisk: bool = True
    asynchronous: bool = False
    argsinfo: Mapping[str, ArgInfo] = field(default_factory=dict)
    in_band: bool = False
    """One of the ramdisk agent's steps: never a core step of the deploy plan."""

    @property
    def name(self) -> str:
        return f"{self.interface}.{self.step}"

    def to_record(self) -> dict[str, Any]:
        """The JSON form stored in plans and shown as ``clean_step``/``deploy_step``."""
        return {
            "interface": self.interface,
            "step": self.step,
            "priority": self.priority,
            "args": dict(self.args),
            "abortable": self.abortable,
            "requires_ramdisk": self.requires_ramdisk,
            "asynchronous": self.asynchronous,
        }


def sort_key(step: Step) -> tuple[int, int]:
    try:
        rank = INTERFACE_ORDER.index(step.interface)
    except ValueError:
        rank = len(INTERFACE_ORDER)
    return (-step.priority, rank)


def _declared(
    impl: Interface, node: Node, kind: StepKind, progress: FlowProgress, agent_steps: bool
) -> list[StepDecl]:
    task = ReadOnlyTask(node, progress=progress)
    if kind == "deploy" and impl.agent_steps_after is not None and not agent_steps:
        # Its agent's deploy steps are this deployment's agent's, known once its boot
        # step has run: whatever an earlier agent left cached is not read.
        return Interface.get_steps(impl, task, kind)
    # Through the interface's own listing: an in-band one may not know its steps yet
    # and says so (``StepsNotKnown``), which callers pass on.
    return impl.get_steps(task, kind)


@dataclass(frozen=True, slots=True)
class Catalogue:
    """The deploy steps a node offers before its agent has reported: the known ones, and
    the interfaces whose agent steps come later, each with the step that boots the agent."""

    steps: list[Step]
    """Declared steps (and, once reported, the agent's), overrides applied, in plan order."""
    waiting: Mapping[str, Step]
    """Family -> its step after which its agent's steps are known (``deploy.deploy``)."""


def deploy_catalogue(
    drivers: DriverRegistry, node: Node, overrides: Mapping[str, int], *, agent_steps: bool
) -> Catalogue:
    """The node's deploy steps: with ``agent_steps``, the agent's too (the deployment's
    agent has reported; ``StepsNotKnown`` if it has not), else the declared ones and
    which interfaces wait for their agent's."""
    found, unknown = _collect(drivers, node, "deploy", overrides, NO_FLOW, agent_steps)
    if unknown:
        raise next(iter(unknown.values()))
    waiting: dict[str, Step] = {}
    if not agent_steps:
        for family, impl in drivers.interfaces(node).items():
            after = impl.agent_steps_after
            if after is None:
                continue
            boot = next((s for s in found if s.interface == family and s.step == after), None)
            if boot is not None:
                waiting[family] = boot
    return Catalogue(found, waiting)


def supported_steps(
    drivers: DriverRegistry,
    node: Node,
    kind: StepKind,
    overrides: Mapping[str, int],
    progress: FlowProgress = NO_FLOW,
    *,
    without_ramdisk: bool = False,
) -> list[Step]:
    """Every ``kind`` step the node's interfaces offer, overrides applied, in plan order.

    Raises ``StepsNotKnown`` when an interface cannot list its steps yet
    (``progress`` tells whether a ramdisk is on its way to report them), unless
    the plan is ``without_ramdisk``: that interface's steps are the agent's,
    which cannot run then, so it offers none.
    """
    # Deploy steps: the declared ones (``deploy_catalogue`` adds the agent's).
    found, unknown = _collect(drivers, node, kind, overrides, progress, agent_steps=False)
    if unknown and not without_ramdisk:
        raise next(iter(unknown.values()))
    return found


def _collect(
    drivers: DriverRegistry,
    node: Node,
    kind: StepKind,
    overrides: Mapping[str, int],
    progress: FlowProgress,
    agent_steps: bool,
) -> tuple[list[Step], dict[str, StepsNotKnown]]:
    """The steps of the interfaces that can list theirs, and why the others (by family)
    cannot. Without ``agent_steps``, deploy interfaces list their declared steps only."""
    found: list[Step] = []
    unknown: dict[str, StepsNotKnown] = {}
    for family, impl in drivers.interfaces(node).items():
        try:
            declared = _declared(impl, node, kind, progress, agent_steps)
        except StepsNotKnown as exc:
            unknown[family] = exc
            continue
        for decl in declared:
            name = f"{family}.{decl.method}"
            found.append(
                Step(
                    interface=family,
                    step=decl.method,
                    priority=overrides.get(name, decl.priority),
                    abortable=decl.abortable,
                    requires_ramdisk=decl.requires_ramdisk,
                    asynchronous=decl.asynchronous,
                    argsinfo=decl.argsinfo,
                    in_band=decl.in_band,
                )
            )
    return sorted(found, key=sort_key), unknown


def check_requested(
    drivers: DriverRegistry,
    node: Node,
    kind: StepKind,
    overrides: Mapping[str, int],
    requested: Sequence[Mapping[str, Any]],
    *,
    without_ramdisk: bool = False,
) -> None:
    """Refuse (``StepRequestError``) what can be judged of a request before any work.

    The steps of interfaces that know theirs are checked in full; a step on an
    in-band interface whose agent has not reported yet is left for the
    conductor to judge once it has (unless ``without_ramdisk``: no agent will).
    """
    known, unknown = _collect(drivers, node, kind, overrides, NO_FLOW, agent_steps=False)
    waiting = set() if without_ramdisk else set(unknown)
    judged = [entry for entry in requested if str(entry.get("interface")) not in waiting]
    plan = requested_plan(known, judged)
    if without_ramdisk:
        check_without_ramdisk(plan)


def unknown_overrides(overrides: Mapping[str, int], supported: Sequence[Step]) -> list[str]:
    """The priority overrides naming a step the node does not offer (a typo, or a step of
    another hardware type), sorted."""
    known = {s.name for s in supported}
    return sorted(name for name in overrides if name not in known)


def automated_plan(steps: Sequence[Step]) -> list[Step]:
    """The steps that run without being asked for: priority above zero, in order."""
    return [s for s in steps if s.priority > 0]


def check_args(step: Step, args: Mapping[str, Any]) -> None:
    """Refuse unknown arguments and missing required ones, naming them."""
    unknown = sorted(set(args) - set(step.argsinfo))
    if unknown:
        raise StepRequestError(
            f"step {step.name} does not accept argument(s) {', '.join(unknown)}"
            + (f"; it accepts {', '.join(sorted(step.argsinfo))}" if step.argsinfo else "")
        )
    missing = sorted(n for n, info in step.argsinfo.items() if info.required and n not in args)
    if missing:
        raise StepRequestError(f"step {step.name} requires argument(s) {', '.join(missing)}")
    for name, value in args.items():
        check = step.argsinfo[name].check
        if check is None:
            continue
        try:
            check(value)
        except (ValueError, DriverError) as exc:
            raise StepRequestError(f"step {step.name}: {exc}") from None


def requested_plan(supported: Sequence[Step], requested: Sequence[Mapping[str, Any]]) -> list[Step]:
    """Resolve an operator's ordered step list (manual cleaning) against what the node supports.

    The order given is kept; unknown interfaces, steps and arguments are refused
    before anything runs.
    """
    by_name = {s.name: s for s in supported}
    families = {s.interface for s in supported}
    plan: list[Step] = []
    for entry in requested:
        interface, name = str(entry["interface"]), str(entry["step"])
        full = f"{interface}.{name}"
        found = by_name.get(full)
        if found is None:
            if interface not in families:
                raise StepRequestError(
                    f"the node's {interface} interface has no steps; cannot run {full}"
                )
            raise StepRequestError(f"the node does not support the step {full}")
        args = dict(entry.get("args") or {})
        check_args(found, args)
        plan.append(
            Step(
                found.interface,
                found.step,
                found.priority,
                args,
                found.abortable,
                found.requires_ramdisk,
                found.asynchronous,
                found.argsinfo,
            )
        )
    return plan


def check_without_ramdisk(plan: Sequence[Step]) -> None:
    """Refuse a ``disable_ramdisk`` clean that names a step only the ramdisk agent can run."""
    needing = [s.name for s in plan if s.requires_ramdisk]
    if needing:
        raise StepRequestError(
            f"step(s) {', '.join(needing)} need the ramdisk; they cannot run with disable_ramdisk"
        )


def from_record(record: Mapping[str, Any]) -> Step:
    """Rebuild a stored plan entry."""
    return Step(
        interface=str(record["interface"]),
        step=str(record["step"]),
        priority=int(record.get("priority", 0)),
        args=dict(record.get("args") or {}),
        abortable=bool(record.get("abortable", False)),
        requires_ramdisk=bool(record.get("requires_ramdisk", True)),
        asynchronous=bool(record.get("asynchronous", False)),
    )
