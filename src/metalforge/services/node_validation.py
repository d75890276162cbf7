"""Node validation: whether each driver interface accepts the node as configured."""

from __future__ import annotations

from dataclasses import dataclass

from metalforge.conductor import deploy_plan, step_plans
from metalforge.db.models import Node
from metalforge.drivers.base import DriverError, ReadOnlyTask
from metalforge.drivers.hardware import UnknownDriver
from metalforge.services import lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version

VALIDATED = (
    "boot",
    "console",
    "deploy",
    "inspect",
    "management",
    "network",
    "power",
    "raid",
    "rescue",
    "storage",
    "bios",
    "firmware",
)


@dataclass(frozen=True)
class Outcome:
    """One interface's answer: ``True``, ``False`` (with why) or ``None`` (not supported)."""

    result: bool | None
    reason: str | None = None


@dataclass(frozen=True)
class Validation:
    node: Node
    outcomes: dict[str, Outcome]


def validate_node(svc: Services, ident: str, version: Version) -> Validation:
    """Ask every interface family; ``deploy`` also plans the deployment the traits select."""
    overrides = svc.settings.conductor.deploy_step_priority_override
    outcomes: dict[str, Outcome] = {}
    with svc.db.read() as session:
        node = lookup.find_node(session, ident, version)
        task = ReadOnlyTask(node, interfaces=lambda family: svc.drivers.family(node, family))
        for family in VALIDATED:
            try:
                iface = svc.drivers.family(node, family)
            except UnknownDriver as exc:
                outcomes[family] = Outcome(False, str(exc))
                continue
            if iface.name.startswith("no-"):
                outcomes[family] = Outcome(None, f"not supported ({iface.name})")
                continue
            try:
                iface.validate(task)
                if family == "deploy":
                    # The deployment this node would run: its traits and templates,
                    # and every template its traits could select later.
                    deploy_plan.plan_for_node(session, svc.drivers, node, overrides)
                    deploy_plan.check_node_templates(session, svc.drivers, node, overrides)
                outcomes[family] = Outcome(True)
            except (DriverError, step_plans.StepRequestError, UnknownDriver) as exc:
                # UnknownDriver: planning the deployment resolves every interface,
                # and another family's may be one the hardware type lacks.
                outcomes[family] = Outcome(False, str(exc))
    return Validation(node, outcomes)
