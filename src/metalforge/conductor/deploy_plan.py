"""The deploy plan: default steps, then deploy templates, then the request's steps.

One function builds it for the conductor (``flows.deploying``), for the API's
check of a deploy request and for the plan preview, so a preview shows
exactly what a deployment would run and a request that could not be planned
is refused before the node moves.

Layers, lowest first:

1. the driver's enabled deploy steps (priority above 0 after
   ``conductor.deploy_step_priority_override``);
2. the steps of every deploy template whose name is in
   ``instance_info.traits``, templates in the order of those traits;
3. the ``deploy_steps`` of the provision request.

A layer that names a step (``interface.step``) replaces every entry of that
step from the layers below: its priority and arguments win, and priority 0
removes the step. Within a layer the same step may appear several times
(two templates, or a request listing it twice); each occurrence with a
non-zero priority runs, which is how one step is repeated with different
arguments. A template itself may hold a step only once (the API refuses
duplicates). Core steps -- the deploy interface's steps that run by default
-- can be disabled but never moved or repeated: the other steps are placed
around them. The plan runs by priority, highest first; ties keep interface
order, then layer order.

An agent's deploy steps (``custom-agent``, ``direct``) are known only once
the deployment's boot step (``deploy.deploy``) has booted the agent and it
has reported them. Until then the plan is provisional: an entry naming a
step the interface does not declare is *deferred* (accepted when it sorts
after the boot step, so it cannot have had to run before the agent was up)
and the plan is completed once, after the boot step, with the agent's steps
(``complete``); the steps already run must be the new plan's first steps, so
a plan never shifts under the index that is saved. Ironic's in-band deploy
steps work the same way (``skip_missing`` and one replan after the first
heartbeat) but silently misorder a step above the boot step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from metalforge.conductor import history, step_plans
from metalforge.conductor.step_plans import Step
from metalforge.conductor.task import NodeTask
from metalforge.db.models import DeployTemplate, Node, NodeTrait
from metalforge.drivers.hardware import DriverRegistry


class PlanError(step_plans.StepRequestError):
    """The deployment cannot be planned; the message names the template or step at fault."""


@dataclass(frozen=True, slots=True)
class Source:
    """Where requested steps come from, for error messages and history."""

    label: str
    """``deploy template CUSTOM_X`` or ``deploy_steps``."""
    steps: Sequence[Mapping[str, Any]]
    """Entries with ``interface``, ``step``, ``args`` and ``priority``."""


@dataclass(frozen=True, slots=True)
class Deferred:
    """A requested step left for the agent to offer (``deploy.install_coreos(80)``)."""

    label: str
    name: str
    priority: int

    def __str__(self) -> str:
        return f"{self.name}({self.priority}) from {self.label}"


@dataclass(frozen=True, slots=True)
class Plan:
    steps: list[Step]
    templates: list[str]
    """Names of the templates that contributed, in the order they were applied."""
    supported: list[Step]
    """Every deploy step the node offers, overrides applied (what the plan chose from)."""
    deferred: tuple[Deferred, ...] = ()
    """Entries naming agent steps not reported yet: judged when the plan is completed."""
    completes_after: str | None = None
    """The plan is provisional until this step (the one booting the agent) has run."""


def _priority(label: str, name: str, raw: Any) -> int:
    if isinstance(raw, bool):
        raise PlanError(f"{label}: invalid priority {raw!r} for {name}")
    if isinstance(raw, int) and raw >= 0:
        return raw
    if isinstance(raw, str) and raw.isascii() and raw.isdigit():
        return int(raw)
    raise PlanError(f"{label}: invalid priority {raw!r} for {name}; it must be an integer >= 0")


def merge(
    supported: Sequence[step_plans.Step], layers: Sequence[Sequence[Source]]
) -> list[step_plans.Step]:
    """The ordered plan: enabled ``supported`` steps overridden layer by layer.

    Raises ``PlanError`` for a step the node does not support, arguments the
    step does not take (or a missing required one), and a core step given a
    new priority or listed twice.
    """
    return merge_provisional(supported, layers, {})[0]


def merge_provisional(
    supported: Sequence[step_plans.Step],
    layers: Sequence[Sequence[Source]],
    waiting: Mapping[str, step_plans.Step],
) -> tuple[list[step_plans.Step], list[Deferred]]:
    """``merge``, where an entry naming an undeclared step of a ``waiting`` interface (its
    agent has not reported yet) is deferred rather than refused, if it sorts after that
    interface's boot step. Returns the known plan and the deferred entries."""
    by_name = {s.name: s for s in supported}
    core = {
        s.name: s.priority
        for s in supported
        if s.interface == "deploy" and s.priority > 0 and not s.in_band
    }
    chosen: dict[str, list[step_plans.Step]] = {s.name: [s] for s in supported if s.priority > 0}
    deferred: list[Deferred] = []
    for layer in layers:
        mentioned: dict[str, list[step_plans.Step]] = {}
        for source in layer:
            for entry in source.steps:
                name = f"{entry['interface']}.{entry['step']}"
                base = by_name.get(name)
                if base is None:
                    boot = waiting.get(str(entry["interface"]))
                    if boot is None:
                        raise PlanError(
                            f"{source.label}: the node does not support the deploy step "
                            f"{name}{_offered(supported, str(entry['interface']))}"
                        )
                    priority = _priority(source.label, name, entry.get("priority"))
                    deferred.append(_defer(source.label, name, priority, boot))
                    continue
                priority = _priority(source.label, name, entry.get("priority"))
                if name in core and priority not in (0, core[name]):
                    raise PlanError(
                        f"{source.label}: {name} is a core deploy step; it can be disabled "
                        f"(priority 0) but not moved from priority {core[name]}"
                    )
                args = dict(entry.get("args") or {})
                group = mentioned.setdefault(name, [])
                if priority == 0:
                    continue
                try:
                    step_plans.check_args(base, args)
                except step_plans.StepRequestError as exc:
                    raise PlanError(f"{source.label}: {exc}") from None
                if name in core and group:
                    raise PlanError(
                        f"{source.label}: the core deploy step {name} can run only once"
                    )
                group.append(dataclasses.replace(base, priority=priority, args=args))
        chosen.update(mentioned)
    merged = sorted(
        (s for group in chosen.values() for s in group), key=step_plans.sort_key
    )  # stable: ties keep layer order
    for later in deferred:
        boot = waiting[later.name.split(".", 1)[0]]
        if later.priority > 0 and not any(s.name == boot.name for s in merged):
            raise PlanError(
                f"{later.label}: {later.name} can only be one of the ramdisk agent's deploy "
                f"steps, and {boot.name}, which boots the agent, is disabled in this plan"
            )
    return merged, deferred


def _defer(label: str, name: str, priority: int, boot: step_plans.Step) -> Deferred:
    """An entry for an agent step not reported yet, if it can only run after ``boot``."""
    if boot.priority == 0 and priority > 0:  # the boot step is disabled (an override)
        raise PlanError(
            f"{label}: {name} can only be one of the ramdisk agent's deploy steps, and "
            f"{boot.name}, which boots the agent, is disabled in this plan"
        )
    if priority >= boot.priority > 0:
        raise PlanError(
            f"{label}: {name} (priority {priority}) is not a step the deploy interface "
            f"declares; it can only be one of the ramdisk agent's deploy steps, which run "
            f"after {boot.name} (priority {boot.priority}) boots the agent: give it a "
            f"priority below {boot.priority}"
        )
    return Deferred(label, name, priority)


def _offered(supported: Sequence[step_plans.Step], interface: str) -> str:
    """``; the ramdisk agent offers: ...`` once an agent reported the interface's steps."""
    names = sorted(s.name for s in supported if s.interface == interface and s.in_band)
    return f"; the ramdisk agent offers: {', '.join(names)}" if names else ""


def requested_traits(instance_info: Mapping[str, Any]) -> list[str]:
    """``instance_info.traits`` as a list of names (an allocation or the operator sets it)."""
    raw = instance_info.get("traits") or []
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise PlanError(f"instance_info.traits must be a list of trait names, not {raw!r}")
    return list(dict.fromkeys(raw))


_NODE_TRAITS = select(NodeTrait.__table__.c.trait).where(
    NodeTrait.__table__.c.node_id == bindparam("b_node")
)


def node_traits(session: Session, node: Node) -> set[str]:
    """The node's traits, read by id (the conductor's node is a detached copy).

    A statement built once: every deploy request and every deploy plan reads it.
    """
    return set(session.connection().scalars(_NODE_TRAITS, {"b_node": node.id}))


def check_traits(requested: Iterable[str], available: set[str]) -> None:
    missing = [t for t in requested if t not in available]
    if missing:
        raise PlanError(
            f"The requested trait(s) {', '.join(missing)} are not traits of the node "
            "(instance_info.traits must be a subset of the node's traits)"
        )


def template_sources(session: Session, traits: Sequence[str]) -> list[Source]:
    """The templates named by ``traits``, in the order of ``traits``; other traits select none."""
    if not traits:
        return []
    found = {
        t.name: t
        for t in session.scalars(select(DeployTemplate).where(DeployTemplate.name.in_(traits)))
    }
    return [
        Source(
            f"deploy template {name}",
            [
                {"interface": s.interface, "step": s.step, "args": s.args, "priority": s.priority}
                for s in found[name].steps
            ],
        )
        for name in traits
        if name in found
    ]


def plan_for_node(
    session: Session,
    drivers: DriverRegistry,
    node: Node,
    overrides: Mapping[str, int],
    requested: Sequence[Mapping[str, Any]] = (),
    traits: Sequence[str] | None = None,
    *,
    agent_steps: bool = False,
) -> Plan:
    """The plan a deployment of ``node`` runs, with ``traits`` in place of the node's own:
    provisional (``Plan.completes_after``) unless ``agent_steps`` (its agent has reported).

    Checks first that the traits are the node's, so a refusal names the
    missing trait rather than a template's step.
    """
    wanted = requested_traits(node.instance_info) if traits is None else list(traits)
    check_traits(wanted, node_traits(session, node))
    templates = template_sources(session, wanted)
    catalogue = step_plans.deploy_catalogue(drivers, node, overrides, agent_steps=agent_steps)
    layers: list[list[Source]] = [templates]
    if requested:
        layers.append([Source("deploy_steps", requested)])
    steps, deferred = merge_provisional(catalogue.steps, layers, catalogue.waiting)
    boots = {s.name for s in catalogue.waiting.values()}
    after = next((s.name for s in steps if s.name in boots), None)
    return Plan(
        steps,
        [t.label.removeprefix("deploy template ") for t in templates],
        catalogue.steps,
        tuple(deferred),
        after,
    )


def complete(
    session: Session,
    drivers: DriverRegistry,
    node: Node,
    overrides: Mapping[str, int],
    requested: Sequence[Mapping[str, Any]],
    done: Sequence[Step],
) -> Plan:
    """The final plan, once the agent booted by ``done``'s last step has reported its steps.

    It is planned again, as at the start but with the agent's steps, and
    ``done`` must be its start: raises ``PlanError`` naming the first step
    that would have run before (an agent step enabled above the boot step, a
    template changed meanwhile), or ``StepsNotKnown``.
    """
    plan = plan_for_node(session, drivers, node, overrides, requested, agent_steps=True)
    for ran, now in zip(done, plan.steps, strict=False):
        if (ran.name, ran.priority, dict(ran.args)) == (now.name, now.priority, dict(now.args)):
            continue
        if now.in_band:
            raise PlanError(
                f"the ramdisk agent's deploy step {now.name} (priority {now.priority}) would "
                f"run where {ran.name} (priority {ran.priority}) already ran: an agent step "
                f"must sort after {done[-1].name}, which boots the agent (disable it with "
                f'conductor.deploy_step_priority_override "{now.name}:0")'
            )
        raise PlanError(
            f"the deployment's steps changed since it started (a deploy template, the "
            f"node's traits or a priority override): {now.name} (priority {now.priority}) "
            f"would run where {ran.name} (priority {ran.priority}) already ran"
        )
    if len(plan.steps) < len(done):
        raise PlanError(
            f"the deployment's steps changed since it started: the plan no longer holds "
            f"{', '.join(s.name for s in done[len(plan.steps) :])}, which already ran"
        )
    return plan


def check_node_templates(
    session: Session, drivers: DriverRegistry, node: Node, overrides: Mapping[str, int]
) -> None:
    """Every template the node's own traits enable must be runnable on the node (seed 001).

    Not only the ones a deployment requests now: a template a flavor may ask
    for later should fail validation today, when the operator can fix it.
    Each template is checked on its own, as any one of them may be requested
    without the others. Raises ``PlanError`` naming the template and step.
    """
    templates = template_sources(session, sorted(node_traits(session, node)))
    if not templates:
        return
    catalogue = step_plans.deploy_catalogue(drivers, node, overrides, agent_steps=False)
    for template in templates:
        merge_provisional(catalogue.steps, [[template]], catalogue.waiting)


def complete_for_task(task: NodeTask, done: Sequence[Step]) -> list[Step]:
    """``complete`` for the deployment ``task`` runs (``stepflow.DEPLOY.completes``): with
    its request's steps, and refusing an agent step that would need a reboot after it."""
    overrides = task.ctx.settings.deploy_step_priority_override
    with task.ctx.db.read() as session:
        plan = complete(
            session, task.ctx.drivers, task.node, overrides, task.progress.requested, done
        )
    unknown = step_plans.unknown_overrides(overrides, plan.supported)
    if unknown:
        task.record(
            "deploy_plan",
            "conductor.deploy_step_priority_override names step(s) this node does not "
            f"offer, ignored: {', '.join(unknown)}",
            history.WARNING,
        )
    rebooting = _rebooting(task.node.driver_internal_info.get("agent_cached_deploy_steps"))
    for step in plan.steps[len(done) :]:
        if step.in_band and step.name in rebooting:
            raise PlanError(
                f"the ramdisk agent's deploy step {step.name} asks for a reboot after it; "
                "metalforge does not reboot a node between deploy steps"
            )
    return plan.steps


def _rebooting(cached: Any) -> set[str]:
    """The agent steps that declare ``reboot_requested``, as ``interface.step``."""
    if not isinstance(cached, list):
        return set()
    return {
        f"{entry.get('interface', 'deploy')}.{entry.get('step')}"
        for entry in cached
        if isinstance(entry, dict) and entry.get("reboot_requested") is True
    }
