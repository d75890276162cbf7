"""What a rule may say, and reading one: every operator's arguments, declared once.

A rule is checked whole before it is stored (``parse_rule``): an unknown
operator, arguments that do not fit the operator, a reference that names
nothing a rule can read, a regular expression that does not compile, a
subnet or a log level that is not one: each is a ``RuleInvalid`` naming the
condition or action, and the API answers 400 with it. Arguments are given by
name (an object) or, as older rules do, by position (a list: the required
arguments, then the optional ones); ``Step.args`` always has them by name,
and the rule keeps what it was given to show it back unchanged.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from metalforge.db.models import INTERFACES
from metalforge.inspection_rules import patterns, references

PHASES: Final = ("main",)
MAX_PRIORITY: Final = 9999
"""The highest priority an operator's rule may have (built-in rules are not bounded)."""
MAX_STEPS: Final = 100
"""Conditions, and actions, one rule may have."""
MAX_LOOP: Final = 1000
"""Items one loop may run over."""
MAX_DESCRIPTION: Final = 255
LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")
MULTIPLE: Final = ("any", "all", "first", "last")
NODE_DICT_FIELDS: Final = frozenset(
    {"driver_info", "extra", "instance_info", "network_data", "properties"}
)
NODE_TEXT_FIELDS: Final = frozenset(
    {"description", "resource_class", "owner", "lessee", "shard", "conductor_group"}
)
NODE_DRIVER_FIELDS: Final = frozenset({"driver", *(f"{f}_interface" for f in INTERFACES)})
"""The hardware type and interfaces: a discovery rule sets them from what the report says
(an iDRAC's address: ``idrac``); the conductor checks the result as a PATCH is checked."""
NODE_FIELDS_SET: Final = NODE_DICT_FIELDS | NODE_TEXT_FIELDS | NODE_DRIVER_FIELDS
"""The node fields an action may change: the free-form documents, the plain text fields
an inspection decides, and the driver with its interfaces (never the name or a state).
A rule naming another field is stored, as Ironic stores it; the action fails when run."""


class RuleInvalid(ValueError):
    """The rule cannot be stored; the message names what is wrong."""


@dataclass(frozen=True)
class Signature:
    """An operator's arguments: required ones, optional ones with their defaults, and
    those rendered from references outside a loop (inside one, all are)."""

    required: tuple[str, ...]
    optional: Mapping[str, Any] = field(default_factory=dict)
    rendered: frozenset[str] = frozenset()

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.required, *self.optional)


def _sig(required: str, optional: Mapping[str, Any] | None = None, rendered: str = "") -> Signature:
    return Signature(tuple(required.split()), dict(optional or {}), frozenset(rendered.split()))


_COMPARE = _sig("values", {"force_strings": False}, "values")
_VALUE = _sig("value", rendered="value")
_PATTERN = _sig("value regex", rendered="value")
CONDITIONS: Final[Mapping[str, Signature]] = {
    "eq": _COMPARE,
    "lt": _COMPARE,
    "gt": _COMPARE,
    "is-empty": _VALUE,
    "is-none": _VALUE,
    "is-true": _VALUE,
    "is-false": _VALUE,
    "in-net": _sig("address subnet", rendered="address subnet"),
    "matches": _PATTERN,
    "contains": _PATTERN,
    "one-of": _sig("value", {"values": []}, "value"),
}
ACTIONS: Final[Mapping[str, Signature]] = {
    "fail": _sig("msg"),
    "log": _sig("msg", {"level": "info"}, "msg"),
    "set-attribute": _sig("path value", rendered="path value"),
    "extend-attribute": _sig("path value", {"unique": False}, "path value"),
    "del-attribute": _sig("path", rendered="path"),
    "set-capability": _sig("name value", rendered="name value"),
    "unset-capability": _sig("name", rendered="name"),
    "add-trait": _sig("name", rendered="name"),
    "remove-trait": _sig("name", rendered="name"),
    "set-plugin-data": _sig("path value", rendered="path value"),
    "extend-plugin-data": _sig("path value", {"unique": False}, "path value"),
    "unset-plugin-data": _sig("path", rendered="path"),
    "set-port-attribute": _sig("port_id path value", rendered="port_id path value"),
    "extend-port-attribute": _sig("port_id path value", {"unique": False}, "port_id path value"),
    "del-port-attribute": _sig("port_id path", rendered="port_id path"),
    "api-call": _sig(
        "url",
        {"headers": None, "proxies": None, "timeout": 5, "retries": 3, "backoff_factor": 0.3},
        "url",
    ),
}
"""Every action and its arguments. References render in every argument but ``fail``'s
message (Ironic renders only values and messages; a path, a name or a port given
literally renders to itself, so the wider rule changes nothing for Ironic's rules)."""
REFUSED_ACTIONS: Final[Mapping[str, str]] = {
    "api-call": "api-call is not supported: rules run on reports from unauthenticated "
    "ramdisks, and a call to an address taken from a report would let any machine on "
    "the provisioning network make the conductor reach a host of its choosing",
}

Kind = Literal["condition", "action"]


@dataclass(frozen=True)
class Step:
    """One condition or action, its arguments by name."""

    op: str
    args: Mapping[str, Any]
    loop: tuple[Any, ...] | Mapping[str, Any] | None = None
    negated: bool = False
    """A condition written ``!op``: its result is inverted."""
    multiple: str = "any"
    """How a looped condition's results combine."""


@dataclass(frozen=True)
class FieldCheck:
    """One condition of an ironic-inspector rule (``inspection_rules.inspector``)."""

    op: str
    scheme: str
    """``data`` (the introspection data) or ``node``."""
    path: tuple[str | int, ...]
    value: Any
    invert: bool
    multiple: str


@dataclass(frozen=True)
class Rule:
    """A rule as the engine runs it and the API shows it."""

    uuid: str | None
    priority: int
    phase: str
    description: str | None
    sensitive: bool
    conditions: tuple[Step, ...]
    actions: tuple[Step, ...]
    shown_conditions: list[dict[str, Any]]
    """The conditions as given (arguments as listed or named), for the API to show."""
    shown_actions: list[dict[str, Any]]
    built_in: bool = False
    field_checks: tuple[FieldCheck, ...] = ()
    """An inspector rule's conditions (checked with ``conditions``)."""
    scope: str | None = None
    """An inspector rule's scope: it applies only to nodes whose
    ``properties.inspection_scope`` is this text."""
    dialect: Literal["ironic", "inspector"] = "ironic"
    """Whose format the rule was given in (an inspector rule's values read ``{data[...]}``)."""


_BODY_KEYS = frozenset(
    {"uuid", "description", "priority", "phase", "sensitive", "conditions", "actions"}
)


def parse_rule(body: Mapping[str, Any], *, built_in: bool = False) -> Rule:
    """Read and check a whole rule (the API's create body, or a built-in rule)."""
    unknown = sorted(set(body) - _BODY_KEYS)
    if unknown:
        raise RuleInvalid(f"unknown field(s) {', '.join(unknown)}")
    uuid = body.get("uuid")
    if uuid is not None and not isinstance(uuid, str):
        raise RuleInvalid("uuid must be a string")
    description = body.get("description")
    if description is not None and (
        not isinstance(description, str) or len(description) > MAX_DESCRIPTION
    ):
        raise RuleInvalid(f"description must be a string of at most {MAX_DESCRIPTION} characters")
    sensitive = body.get("sensitive")
    if sensitive is not None and not isinstance(sensitive, bool):
        raise RuleInvalid("sensitive must be a boolean")
    conditions = body.get("conditions")
    conditions = [] if conditions is None else conditions
    actions = body.get("actions")
    if actions is None:
        raise RuleInvalid("actions is required: a rule does something")
    parsed_conditions = _steps(conditions, "condition")
    parsed_actions = _steps(actions, "action")
    if not parsed_actions:
        raise RuleInvalid("actions must list at least one action")
    return Rule(
        uuid=uuid,
        priority=check_priority(body.get("priority", 0), built_in=built_in),
        phase=check_phase(body.get("phase", "main")),
        description=description,
        sensitive=bool(sensitive),
        conditions=parsed_conditions,
        actions=parsed_actions,
        shown_conditions=[_shown(c, "condition") for c in conditions],
        shown_actions=[_shown(a, "action") for a in actions],
        built_in=built_in,
    )


def check_priority(value: Any, *, built_in: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RuleInvalid(f"priority must be an integer, not {value!r}")
    if value < 0:
        raise RuleInvalid("Priority cannot be negative for user-defined rules.")
    if value > MAX_PRIORITY and not built_in:
        raise RuleInvalid(f"Priority must be between 0 and {MAX_PRIORITY} for user-defined rules.")
    return value


def check_phase(value: Any) -> str:
    if value not in PHASES:
        raise RuleInvalid(f"Invalid phase: {value}. Valid phases are: {', '.join(PHASES)}")
    return str(value)


def _steps(given: Any, kind: Kind) -> tuple[Step, ...]:
    if not isinstance(given, list):
        raise RuleInvalid(f"{kind}s must be a list")
    if len(given) > MAX_STEPS:
        raise RuleInvalid(f"a rule may have at most {MAX_STEPS} {kind}s")
    return tuple(_step(entry, kind, index) for index, entry in enumerate(given, 1))


def _step(entry: Any, kind: Kind, index: int) -> Step:
    where = f"{kind} {index}"
    if not isinstance(entry, dict):
        raise RuleInvalid(f"{where} must be an object with op and args")
    allowed = {"op", "args", "loop"} | ({"multiple"} if kind == "condition" else set())
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise RuleInvalid(f"{where} has unknown key(s) {', '.join(unknown)}")
    op = entry.get("op")
    if not isinstance(op, str):
        raise RuleInvalid(f"{where} needs an op")
    negated = kind == "condition" and op.startswith("!")
    name = op[1:] if negated else op
    table = CONDITIONS if kind == "condition" else ACTIONS
    signature = table.get(name)
    if signature is None:
        raise RuleInvalid(f"{where}: unknown op {op!r}; known: {', '.join(sorted(table))}")
    if name in REFUSED_ACTIONS and kind == "action":
        raise RuleInvalid(f"{where}: {REFUSED_ACTIONS[name]}")
    where = f"{where} ({op})"
    loop = _loop(entry.get("loop"), where)
    multiple = entry.get("multiple", "any")
    if multiple not in MULTIPLE:
        raise RuleInvalid(f"{where}: multiple must be one of {', '.join(MULTIPLE)}")
    args = _named(entry.get("args"), signature, where)
    _check_references(args, where, in_loop=loop is not None)
    _check_literals(name, args, where)
    return Step(name, args, loop, negated, str(multiple))


def _loop(value: Any, where: str) -> tuple[Any, ...] | Mapping[str, Any] | None:
    if value is None or value == [] or value == {}:
        return None
    if isinstance(value, list):
        if len(value) > MAX_LOOP:
            raise RuleInvalid(f"{where}: a loop may run over at most {MAX_LOOP} items")
        return tuple(value)
    if isinstance(value, dict):
        return dict(value)
    raise RuleInvalid(f"{where}: loop must be a list or an object")


def _named(given: Any, signature: Signature, where: str) -> dict[str, Any]:
    """The arguments by name, whichever way they were given."""
    if isinstance(given, list) and signature.required == ("values",):
        # eq, lt and gt given a list: the list is what they compare.
        named: dict[str, Any] = {"values": list(given)}
    elif isinstance(given, list):
        if len(given) < len(signature.required):
            absent = signature.required[len(given) :]
            raise RuleInvalid(f"{where}: missing required argument(s): {', '.join(absent)}")
        if len(given) > len(signature.names):
            raise RuleInvalid(
                f"{where}: {len(given)} arguments given; it takes at most "
                f"{len(signature.names)} ({', '.join(signature.names)})"
            )
        named = dict(zip(signature.names, given, strict=False))
    elif isinstance(given, dict):
        named = dict(given)
        problems = []
        missing = [n for n in signature.required if n not in named]
        if missing:
            problems.append(f"missing required argument(s): {', '.join(missing)}")
        unexpected = sorted(set(named) - set(signature.names))
        if unexpected:
            problems.append(f"unexpected argument(s): {', '.join(unexpected)}")
        if problems:
            raise RuleInvalid(f"{where}: {'; '.join(problems)}")
    else:
        raise RuleInvalid(f"{where}: args must be either a list or an object")
    return {**signature.optional, **named}


def _check_references(args: Mapping[str, Any], where: str, *, in_loop: bool) -> None:
    for name, value in args.items():
        try:
            references.check(value, in_loop=in_loop)
        except references.BadReference as exc:
            raise RuleInvalid(f"{where}: argument {name}: {exc}") from None


def _literal(value: Any) -> str | None:
    """``value`` if it is text without references (so checkable now), else None."""
    return value if isinstance(value, str) and not references.has_reference(value) else None


def _check_literals(op: str, args: Mapping[str, Any], where: str) -> None:
    """Check now what does not depend on the inspection: patterns, subnets, levels, paths."""
    if op in ("matches", "contains") and (pattern := _literal(args["regex"])) is not None:
        try:
            patterns.compiled(pattern)
        except patterns.PatternError as exc:
            raise RuleInvalid(f"{where}: invalid regular expression {pattern!r}: {exc}") from None
    if op == "in-net" and (subnet := _literal(args["subnet"])) is not None:
        try:
            ipaddress.ip_network(subnet, strict=False)
        except ValueError:
            raise RuleInvalid(f"{where}: {subnet!r} is not a subnet") from None
    if op in ("eq", "lt", "gt") and not isinstance(args["values"], (list, str)):
        raise RuleInvalid(f"{where}: values must be a list")
    if op == "log" and str(args["level"]).lower() not in LOG_LEVELS:
        raise RuleInvalid(f"{where}: level must be one of {', '.join(LOG_LEVELS)}")
    if op.endswith(("-attribute", "plugin-data")):
        # Which node field a path may change is checked when the action runs: Ironic
        # stores a rule naming any field.
        path = args["path"]
        if not isinstance(path, str) or not split_path(path):
            raise RuleInvalid(f"{where}: path must name a key")
    for name in ("name", "port_id", "msg"):
        if name in args and not isinstance(args[name], str):
            raise RuleInvalid(f"{where}: {name} must be a string")


def split_path(path: str) -> list[str]:
    """``/a/b`` or ``a.b`` as its keys (a path with a slash is split on slashes)."""
    if "/" in path:
        return [part for part in path.strip("/").split("/") if part != ""]
    return [part for part in path.split(".") if part != ""]


def check_node_path(path: Any, where: str) -> list[str]:
    """The keys of a path into the node, if an action may write there."""
    if not isinstance(path, str):
        raise RuleInvalid(f"{where}: path must be a string")
    if "{" in path or "}" in path:
        return []  # a template: known once rendered, and checked again then
    keys = split_path(path)
    if not keys:
        raise RuleInvalid(f"{where}: path must name a node field")
    if keys[0] not in NODE_FIELDS_SET:
        raise RuleInvalid(
            f"{where}: a rule cannot change the node's {keys[0]}; it may change "
            f"{', '.join(sorted(NODE_FIELDS_SET))}"
        )
    if keys[0] in NODE_TEXT_FIELDS | NODE_DRIVER_FIELDS and len(keys) > 1:
        raise RuleInvalid(f"{where}: {keys[0]} is text, not an object")
    return keys


def _shown(entry: Mapping[str, Any], kind: Kind) -> dict[str, Any]:
    """A condition or action as the API shows it back: op and args as given, and the
    loop (with a condition's ``multiple``) when it has one."""
    shown: dict[str, Any] = {"op": entry["op"], "args": entry["args"]}
    if entry.get("loop"):
        shown["loop"] = entry["loop"]
        if kind == "condition":
            shown["multiple"] = entry.get("multiple", "any")
    return shown


def steps_of(shown: Sequence[Mapping[str, Any]], kind: Kind) -> tuple[Step, ...]:
    """Stored conditions or actions read back (they were checked when stored)."""
    return _steps(list(shown), kind)
