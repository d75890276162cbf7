"""Applying the inspection rules to a processed report, inside the inspection's write.

The rules in force are the stored ones (``services.inspection_rules`` keeps
them) and the built-in ones of ``inspection.built_in_rules`` (a YAML or JSON
list of rules, read at every inspection as Ironic reads it, so an operator's
edit applies to the next one without a restart). They run on a ``Subject``
made of the node's fields, traits and ports (those processing keeps or is
about to create) and the report's inventory and plugin data; what they
change is written by the inspection flow with the inspection's own
transition, so a failed rule leaves nothing half-written.
"""

from __future__ import annotations

import copy
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from metalforge.conductor import history, inspection_report
from metalforge.conductor.task import NodeTask
from metalforge.db.models import INTERFACES, InspectionRule, NodeTrait, Port, utcnow
from metalforge.drivers.base import DriverError
from metalforge.drivers.hardware import UnknownDriver
from metalforge.inspection_rules import engine, references
from metalforge.inspection_rules.actions import PORT_FIELDS, Subject
from metalforge.inspection_rules.grammar import NODE_DRIVER_FIELDS, Rule, RuleInvalid, parse_rule
from metalforge.inspection_rules.stored import rule_of
from metalforge.redaction import mask_secrets

RulesFailed = engine.RulesFailed
_LEVELS = {"debug": history.INFO, "info": history.INFO, "warning": history.WARNING}


def built_in(path: Path | None) -> list[Rule]:
    """The rules of ``path`` (none without one); ``RulesFailed`` when it cannot be read."""
    if path is None:
        return []
    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RulesFailed(f"the built-in rules file {path} cannot be read: {exc}") from None
    if not isinstance(loaded, list):
        raise RulesFailed(f"the built-in rules file {path} must hold a list of rules")
    rules = []
    unnamed = 0
    for index, body in enumerate(loaded, 1):
        if not isinstance(body, dict):
            raise RulesFailed(f"rule {index} of {path} is not an object")
        body = {k: v for k, v in body.items() if k in _RULE_KEYS}
        if not body.get("uuid"):
            body["uuid"] = f"00000000-0000-0000-0000-{unnamed:012d}"
            unnamed += 1
        try:
            rules.append(parse_rule(body, built_in=True))
        except RuleInvalid as exc:
            raise RulesFailed(f"rule {index} of {path}: {exc}") from None
    return rules


_RULE_KEYS = frozenset(
    {"uuid", "description", "priority", "phase", "sensitive", "conditions", "actions"}
)


def stored(session: Session) -> list[Rule]:
    """The rules both APIs stored, in the order they were created."""
    rows = session.scalars(select(InspectionRule).order_by(InspectionRule.id))
    return [rule_of(row) for row in rows]


@dataclass
class Planned:
    """The ports the inspection keeps or creates, as rules see and change them."""

    views: dict[str, dict[str, Any]]
    """By UUID: ``address`` and the fields a rule may change."""
    new: dict[str, str]
    """UUIDs given to the ports processing will create, by MAC."""


def _planned_ports(session: Session, node_id: int, outcome: inspection_report.Outcome) -> Planned:
    views: dict[str, dict[str, Any]] = {}
    for port in session.scalars(select(Port).where(Port.node_id == node_id)):
        if port.address in outcome.delete_ports:
            continue
        view: dict[str, Any] = {"uuid": port.uuid, "address": port.address}
        view.update({name: copy.deepcopy(getattr(port, name)) for name in PORT_FIELDS})
        view["pxe_enabled"] = outcome.set_pxe.get(port.address, port.pxe_enabled)
        views[port.uuid] = view
    new = {}
    for mac, pxe in outcome.create_ports:
        port_uuid = str(uuidlib.uuid4())
        new[mac] = port_uuid
        views[port_uuid] = {
            "uuid": port_uuid,
            "address": mac,
            "extra": {},
            "local_link_connection": {},
            "physical_network": None,
            "pxe_enabled": pxe,
            "is_smartnic": False,
        }
    return Planned(views, new)


@dataclass
class RuleRun:
    """What the rules left to write: the subject, and the ports planned for it."""

    subject: Subject
    ports: Planned
    traits_before: list[str]


def run(task: NodeTask, outcome: inspection_report.Outcome) -> RuleRun | None:
    """Apply the rules in force to ``outcome``; None when there are none.

    The node's fields a rule changed are set on ``task.node`` (written with the
    inspection's transition); ``write`` writes its traits and ports.
    """
    node = task.node
    with task.ctx.db.read() as session:
        rules = stored(session) + built_in(task.settings.inspection.built_in_rules)
        if not rules:
            return None
        traits = list(session.scalars(select(NodeTrait.trait).where(NodeTrait.node_id == node.id)))
        planned = _planned_ports(session, node.id, outcome)
    fields = {
        name: copy.deepcopy(getattr(node, name))
        for name in references.NODE_READABLE
        if hasattr(node, name)
    }
    fields[references.AUTO_DISCOVERED] = outcome.plugin_data.get(references.AUTO_DISCOVERED) is True
    subject = Subject(
        node=fields,
        traits=list(traits),
        ports=planned.views,
        inventory=outcome.inventory,
        plugin_data=copy.deepcopy(outcome.plugin_data),
    )
    for applied in engine.apply(rules, subject):
        if not applied.matched:
            continue
        task.record("inspection_rule", f"rule {applied.rule} applied")
        for level, message in applied.log:
            text = f"rule {applied.rule}: {mask_secrets(message)}"
            task.record("inspection_rule", text, _LEVELS.get(level, history.ERROR))
    changed = {name: subject.node.get(name) for name in subject.changed_fields - {"traits"}}
    if changed.keys() & NODE_DRIVER_FIELDS:
        changed.update(_driver_change(task, changed))
    for name, value in changed.items():
        setattr(node, name, value)
    return RuleRun(subject, planned, traits)


def _driver_change(task: NodeTask, changed: dict[str, Any]) -> dict[str, Any]:
    """The driver and interfaces the rules leave, checked as a PATCH checks them: a new
    driver takes its defaults for the interfaces the rules did not name, and a driver or
    interface this conductor does not have fails the rules (nothing is written)."""
    node = task.node
    driver = changed.get("driver", node.driver)
    renamed = "driver" in changed and driver != node.driver
    requested = {
        family: changed.get(
            f"{family}_interface", None if renamed else getattr(node, f"{family}_interface")
        )
        for family in INTERFACES
    }
    try:
        chosen = task.ctx.drivers.resolve_interface_names(driver, requested)
        hardware = task.ctx.drivers.hardware_type(driver)
        if hardware.check_settings is not None:
            hardware.check_settings(changed.get("driver_info", node.driver_info))
    except (UnknownDriver, DriverError) as exc:
        raise RulesFailed(f"the rules set driver {driver!r}: {exc}") from None
    return {"driver": driver, **{f"{f}_interface": name for f, name in chosen.items()}}


def write(session: Session, node_id: int, done: RuleRun) -> None:
    """The traits and ports the rules changed (in the inspection's transaction)."""
    subject = done.subject
    if "traits" in subject.changed_fields:
        gone = set(done.traits_before) - set(subject.traits)
        if gone:
            session.execute(
                delete(NodeTrait).where(NodeTrait.node_id == node_id, NodeTrait.trait.in_(gone))
            )
        for trait in subject.traits:
            if trait not in done.traits_before:
                session.add(NodeTrait(node_id=node_id, trait=trait))
    now = utcnow()
    new_uuids = set(done.ports.new.values())
    for port_uuid in subject.changed_ports - new_uuids:
        view = subject.ports[port_uuid]
        values = {name: view.get(name) for name in PORT_FIELDS}
        session.execute(update(Port).where(Port.uuid == port_uuid).values(**values, updated_at=now))


def new_port_fields(done: RuleRun | None, mac: str) -> dict[str, Any]:
    """What the rules set on the port processing creates for ``mac`` (and its UUID)."""
    if done is None or mac not in done.ports.new:
        return {"uuid": str(uuidlib.uuid4())}
    port_uuid = done.ports.new[mac]
    view = done.subject.ports[port_uuid]
    return {"uuid": port_uuid, **{name: view.get(name) for name in PORT_FIELDS}}
