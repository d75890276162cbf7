"""The steps a node offers, and the deployment plan a set of traits would select.

Read-only: the catalogue routes (a metalforge addition) show what the
conductor would plan, with the same functions it plans with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from metalforge.conductor import deploy_plan, step_plans
from metalforge.conductor.step_plans import Step as Step
from metalforge.db import flow_progress
from metalforge.drivers.base import StepsNotKnown
from metalforge.drivers.hardware import UnknownDriver
from metalforge.errors import bad_request
from metalforge.services import lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version


@dataclass(frozen=True)
class KnownSteps:
    """The node's clean or service steps, or why they are not known yet (no agent has
    reported them; one may be booting)."""

    node_uuid: str
    steps: list[Step]
    not_known: str | None = None
    retry_after: int = -1


@dataclass(frozen=True)
class DeployPreview:
    steps: list[Step]
    templates: list[str]
    plan: list[Step] | None
    deferred: tuple[deploy_plan.Deferred, ...] = ()
    """Entries naming the ramdisk agent's steps, judged once it has reported them."""


def clean_steps(svc: Services, ident: str, version: Version) -> KnownSteps:
    overrides = svc.settings.conductor.clean_step_priority_override
    return _known_steps(svc, ident, version, "clean", overrides)


def service_steps(svc: Services, ident: str, version: Version) -> KnownSteps:
    """What ``service`` (and a runbook used for it) accepts: the interfaces' own steps
    and, once an agent has run on the node, the agent's."""
    return _known_steps(svc, ident, version, "service", {})


def _known_steps(
    svc: Services,
    ident: str,
    version: Version,
    kind: Literal["clean", "service"],
    overrides: Mapping[str, int],
) -> KnownSteps:
    with svc.db.read() as session:
        node = lookup.find_node(session, ident, version)
        try:
            progress = flow_progress.load(session.connection(), node.id)
            found = step_plans.supported_steps(svc.drivers, node, kind, overrides, progress)
        except StepsNotKnown as exc:
            retry = exc.retry_after if exc.retry_after > 0 else -1
            return KnownSteps(node.uuid, [], str(exc), retry)
    return KnownSteps(node.uuid, found)


def deploy_steps(
    svc: Services, ident: str, version: Version, traits: list[str] | None
) -> DeployPreview:
    """The node's deploy steps; with ``traits``, the plan those traits would select."""
    overrides = svc.settings.conductor.deploy_step_priority_override
    with svc.db.read() as session:
        node = lookup.find_node(session, ident, version)
        try:
            found = step_plans.supported_steps(svc.drivers, node, "deploy", overrides)
            if traits is None:
                return DeployPreview(found, [], None)
            plan = deploy_plan.plan_for_node(session, svc.drivers, node, overrides, traits=traits)
        except (UnknownDriver, step_plans.StepRequestError) as exc:
            raise bad_request(str(exc)) from None
    return DeployPreview(found, list(plan.templates), list(plan.steps), plan.deferred)
