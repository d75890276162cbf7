"""Inspection rules as the API keeps them: create, change, delete, and the rules in force.

A rule is checked whole (``inspection_rules.grammar``) before it is stored,
so what the table holds always parses. Its conditions and actions are
stored as given and shown back unchanged. ``sensitive`` is one-way, as in
Ironic: a rule that hides its conditions and actions from readers cannot be
made to show them again (only replaced). Built-in rules come from a file the
conductor reads (``inspection.built_in_rules``); they are not stored and the
API neither shows nor changes them.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from sqlalchemy import Select, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge.db.models import InspectionRule, utcnow
from metalforge.errors import bad_request, conflict, not_found
from metalforge.inspection_rules import inspector
from metalforge.inspection_rules.grammar import Rule, RuleInvalid, parse_rule
from metalforge.services import lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version
from metalforge.services.patching import Operation, Patchable, PatchPolicy, apply

SINCE: Version = (1, 96)
PATCH = PatchPolicy(
    {
        name: Patchable(since=SINCE)
        for name in ("description", "priority", "phase", "sensitive", "conditions", "actions")
    }
)
"""What a PATCH may change (the UUID and the timestamps are the service's)."""


Dialect = Literal["ironic", "inspector"]


def parsed(body: Mapping[str, Any], dialect: Dialect = "ironic") -> Rule:
    """``body`` read as a rule in ``dialect``'s format: a 400 naming what is wrong."""
    try:
        return parse_rule(body) if dialect == "ironic" else inspector.parse_rule(body)
    except RuleInvalid as exc:
        raise bad_request(str(exc)) from None


def find_rule(session: Session, ident: str, dialect: Dialect = "ironic") -> InspectionRule:
    """One rule of ``dialect`` (the other API's rules are not found through this one)."""
    if dialect == "ironic":
        ident = lookup.check_uuid(ident, "inspection_rule_uuid")
    row = session.scalar(
        select(InspectionRule).where(
            InspectionRule.uuid == ident, InspectionRule.dialect == dialect
        )
    )
    if row is None:
        if dialect == "ironic":
            raise not_found(f"Rule {ident} could not be found.")
        raise not_found(f"Rule {ident} was not found")
    return row


def listing(phase: str | None, dialect: Dialect = "ironic") -> Select[Any]:
    stmt = select(InspectionRule).where(InspectionRule.dialect == dialect)
    return stmt if phase is None else stmt.where(InspectionRule.phase == phase)


def _uuid_for(rule: Rule, dialect: Dialect) -> str:
    if rule.uuid is None:
        return str(uuidlib.uuid4())
    if dialect == "ironic":
        return lookup.check_uuid(rule.uuid)
    if not lookup.is_uuid(rule.uuid):
        raise bad_request("Invalid UUID value")
    return rule.uuid


def create_rule(
    svc: Services, body: Mapping[str, Any], dialect: Dialect = "ironic"
) -> InspectionRule:
    """Store a new rule: 400 for a rule that does not read, 409 for a UUID in use."""
    rule = parsed(body, dialect)
    rule_uuid = _uuid_for(rule, dialect)
    taken = conflict(
        f"A rule with UUID {rule_uuid} already exists."
        if dialect == "ironic"
        else f"Rule with UUID {rule_uuid} already exists"
    )
    try:
        with svc.db.write() as session:
            if session.scalar(select(InspectionRule.id).where(InspectionRule.uuid == rule_uuid)):
                raise taken
            row = InspectionRule(uuid=rule_uuid, dialect=dialect)
            _store(row, rule)
            session.add(row)
            session.flush()
    except IntegrityError:  # a concurrent create with the same UUID won
        raise taken from None
    return row


def _store(row: InspectionRule, rule: Rule) -> None:
    row.description = rule.description
    row.priority = rule.priority
    row.phase = rule.phase
    row.sensitive = rule.sensitive
    row.conditions = rule.shown_conditions
    row.actions = rule.shown_actions
    row.scope = rule.scope


def patch_rule(
    svc: Services, ident: str, version: Version, ops: Sequence[Operation]
) -> InspectionRule:
    """Apply the JSON patch ``ops`` to the stored rule and store the result, checked whole
    (inside the write transaction: a concurrent change is never overwritten)."""
    PATCH.check(ops, version)
    with svc.db.write() as session:
        row = find_rule(session, ident)
        document = {
            "description": row.description,
            "priority": row.priority,
            "phase": row.phase,
            "sensitive": row.sensitive,
            "conditions": row.conditions,
            "actions": row.actions,
        }
        after = apply(document, ops)
        if row.sensitive and after.get("sensitive") is not True:
            raise bad_request("Inspection rules cannot have the sensitive flag unset.")
        rule = parsed({key: value for key, value in after.items() if value is not None})
        _store(row, rule)
        row.updated_at = utcnow()
        session.flush()
        session.refresh(row)
    return row


def delete_rule(svc: Services, ident: str, dialect: Dialect = "ironic") -> None:
    with svc.db.write() as session:
        session.delete(find_rule(session, ident, dialect))


def delete_all(svc: Services, dialect: Dialect = "ironic") -> None:
    """Every stored rule of ``dialect`` (built-in ones are not stored, and stay)."""
    with svc.db.write() as session:
        session.execute(delete(InspectionRule).where(InspectionRule.dialect == dialect))
