"""Running the rules on one inspection: highest priority first, conditions then actions.

A rule whose conditions all hold runs its actions in order; its first
condition that does not hold skips it. A condition with a ``loop`` is asked
once per item (``{item}`` in its arguments) and its results combine as
``multiple`` says: ``any`` (and, as in Ironic, ``first``), ``all``, or
``last``. An action with a loop runs once per item. Outside a loop only the
arguments an operator declares as rendered are (a message of ``fail`` is
shown as written).

A ``fail`` action, or a condition or action that cannot be evaluated, stops
the rules there and fails the inspection with a message naming the rule;
the caller then writes nothing of the subject. ``apply`` returns what the
rules did, for the node's history.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metalforge.inspection_rules import actions, conditions, inspector, references
from metalforge.inspection_rules.grammar import ACTIONS, CONDITIONS, Rule, Step


class RulesFailed(Exception):
    """The inspection fails: a ``fail`` action, or a rule that could not run."""


@dataclass(frozen=True)
class Applied:
    """What one rule did."""

    rule: str
    """The rule as the history names it (its description, else its UUID)."""
    matched: bool
    log: tuple[tuple[str, str], ...] = ()


def ordered(rules: Sequence[Rule]) -> list[Rule]:
    """Highest priority first; equal priorities keep their order (stored rules by
    creation, then built-in ones as their file lists them)."""
    return sorted(rules, key=lambda rule: -rule.priority)


def name_of(rule: Rule) -> str:
    label = rule.uuid or "built-in rule"
    return f"{label} ({rule.description})" if rule.description else label


def apply(rules: Sequence[Rule], subject: actions.Subject) -> list[Applied]:
    """Run every rule of the main phase on ``subject``; ``RulesFailed`` stops them."""
    applied = []
    for rule in ordered([r for r in rules if r.phase == "main"]):
        name = name_of(rule)
        scope = _scope(rule, subject)
        try:
            if not _applies(rule, scope, subject):
                applied.append(Applied(name, matched=False))
                continue
            before = len(subject.log)
            for step in rule.actions:
                _act(step, subject, scope)
        except actions.InspectionFailed as exc:
            raise RulesFailed(f"rule {name} failed the inspection: {exc}") from None
        except (conditions.ConditionError, actions.ActionError) as exc:
            raise RulesFailed(f"rule {name} could not be applied: {exc}") from None
        applied.append(Applied(name, matched=True, log=tuple(subject.log[before:])))
    return applied


def _scope(rule: Rule, subject: actions.Subject) -> references.Scope:
    data = None
    if rule.dialect == "inspector":
        data = inspector.introspection_data(subject.inventory, subject.plugin_data)
    return references.Scope(subject.inventory, subject.plugin_data, subject.node, data=data)


def _applies(rule: Rule, scope: references.Scope, subject: actions.Subject) -> bool:
    """The rule's scope (an inspector rule's) and all its conditions hold."""
    if rule.scope is not None:
        properties = subject.node.get("properties") or {}
        if properties.get("inspection_scope") != rule.scope:
            return False
    if not all(
        inspector.holds(check, scope.data or {}, subject.node) for check in rule.field_checks
    ):
        return False
    return all(_holds(step, scope) for step in rule.conditions)


def _items(loop: tuple[Any, ...] | Mapping[str, Any], scope: references.Scope) -> Iterator[Any]:
    """The loop's items, their own references resolved (``{inventory[bmc_address]}`` in
    an item is the address, once the item is used)."""
    if isinstance(loop, Mapping):
        yield references.render(dict(loop), scope)  # an object loop runs once
    else:
        for item in loop:
            yield references.render(item, scope)


def _args(step: Step, scope: references.Scope, rendered: frozenset[str]) -> dict[str, Any]:
    """The step's arguments with their references resolved (all of them in a loop)."""
    out = {}
    for name, value in step.args.items():
        if not scope.in_loop and name not in rendered:
            out[name] = value
        elif step.op in ("is-empty", "is-none") and name == "value":
            out[name] = references.render_or_none(value, scope)
        else:
            out[name] = references.render(value, scope)
    if scope.in_loop and step.op in ("eq", "lt", "gt"):
        out["force_strings"] = True  # a loop's items render as text, as Ironic's do
    return out


def _holds(step: Step, scope: references.Scope) -> bool:
    check = conditions.OPERATORS[step.op]
    rendered = CONDITIONS[step.op].rendered
    if step.loop is None:
        result = check(_args(step, scope, rendered))
    else:
        results = [
            check(_args(step, _in_loop(scope, item), rendered)) for item in _items(step.loop, scope)
        ]
        if step.multiple == "all":
            result = all(results)
        elif step.multiple == "last":
            result = bool(results) and results[-1]
        else:  # any, and first (which Ironic answers as any)
            result = any(results)
    return result != step.negated


def _act(step: Step, subject: actions.Subject, scope: references.Scope) -> None:
    act = actions.OPERATORS[step.op]
    rendered = ACTIONS[step.op].rendered
    if step.loop is None:
        act(subject, _args(step, scope, rendered))
        return
    for item in _items(step.loop, scope):
        act(subject, _args(step, _in_loop(scope, item), rendered))


def _in_loop(scope: references.Scope, item: Any) -> references.Scope:
    return dataclasses.replace(scope, item=item, in_loop=True)
