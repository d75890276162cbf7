"""A stored rule read back as the engine runs it, whichever API stored it."""

from __future__ import annotations

from metalforge.db.models import InspectionRule
from metalforge.inspection_rules import inspector
from metalforge.inspection_rules.grammar import Rule, parse_rule


def rule_of(row: InspectionRule) -> Rule:
    """``row`` as a ``Rule`` (it was checked whole when it was written)."""
    if row.dialect == "inspector":
        return inspector.parse_rule(
            {
                "uuid": row.uuid,
                "description": row.description,
                "scope": row.scope,
                "conditions": row.conditions,
                "actions": row.actions,
            }
        )
    return parse_rule(
        {
            "uuid": row.uuid,
            "description": row.description,
            "priority": row.priority,
            "phase": row.phase,
            "sensitive": row.sensitive,
            "conditions": row.conditions,
            "actions": row.actions,
        }
    )
