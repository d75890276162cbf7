"""ironic-inspector's rule format, read into the same ``Rule`` the engine runs.

An inspector rule names a ``field`` of the introspection data (or, with
``node://``, of the node) by a JSON path, and compares every value the path
finds with ``value`` (``eq``/``ne``/``lt``/``gt``/``le``/``ge``: the found
value converted to the type of ``value`` when that is a number; ``in-net``,
``matches``, ``contains``, ``is-empty``), inverted by ``invert`` and combined
by ``multiple`` (``any``, ``all``, ``first``). A path that finds nothing
skips the rule (``is-empty`` sees nothing as empty). ``scope`` limits the
rule to nodes whose ``properties.inspection_scope`` is the same text.

Actions (``fail``, ``set-attribute``, ``set-capability``,
``extend-attribute``, ``add-trait``, ``remove-trait``) become the engine's;
their ``value`` may name the data as ``{data[inventory][bmc_address]}``.

Paths are the part of JSON path rules use: names separated by dots, ``[n]``
for a list's item, ``[*]`` for every item of a list and ``*`` for every value
of an object. Nothing else is evaluated.
"""

from __future__ import annotations

import ipaddress
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from metalforge.inspection_rules import patterns, references
from metalforge.inspection_rules.grammar import MAX_STEPS, FieldCheck, Rule, RuleInvalid, Step

OPS: Final[Mapping[str, Callable[[Any, Any], bool]]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "gt": operator.gt,
    "le": operator.le,
    "ge": operator.ge,
}
CONDITIONS: Final = (*OPS, "in-net", "matches", "contains", "is-empty")
ACTIONS: Final[Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "fail": (("message",), ()),
    "set-attribute": (("path", "value"), ("reset_interfaces",)),
    "set-capability": (("name",), ("value",)),
    "extend-attribute": (("path", "value"), ("unique",)),
    "add-trait": (("name",), ()),
    "remove-trait": (("name",), ()),
}
"""Each action's required and optional parameters."""
MULTIPLE: Final = ("any", "all", "first")
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+|\*")


class PathInvalid(ValueError):
    pass


def parse_path(text: str) -> tuple[str | int, ...]:
    """``a.b[0].c``, ``macs[*]``, ``interfaces.*.ip`` as steps (``*`` is every item)."""
    steps: list[str | int] = []
    for part in text.split("."):
        match = re.fullmatch(r"([A-Za-z0-9_*-]*)((?:\[(?:\d+|\*)\])*)", part)
        if match is None or (not match.group(1) and not match.group(2)):
            raise PathInvalid(f"cannot read {part!r}")
        name, indexes = match.groups()
        if name:
            steps.append(name)
        for index in re.findall(r"\[(\d+|\*)\]", indexes):
            steps.append("*" if index == "*" else int(index))
    return tuple(steps)


def find(path: tuple[str | int, ...], data: Any) -> list[Any]:
    """Every value ``path`` finds in ``data``."""
    found = [data]
    for step in path:
        after: list[Any] = []
        for value in found:
            if step == "*":
                if isinstance(value, list):
                    after.extend(value)
                elif isinstance(value, Mapping):
                    after.extend(value.values())
            elif isinstance(step, int):
                if isinstance(value, list) and step < len(value):
                    after.append(value[step])
            elif isinstance(value, Mapping) and step in value:
                after.append(value[step])
        found = after
    return found


def _field(text: Any, where: str) -> tuple[str, tuple[str | int, ...]]:
    if not isinstance(text, str):
        raise RuleInvalid(f"Validation failed for conditions: {where} needs a field")
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "data", text
    if scheme not in ("data", "node"):
        raise RuleInvalid(
            f"Unsupported scheme for field: {scheme}, valid values are node:// or data://"
        )
    try:
        return scheme, parse_path(rest)
    except PathInvalid as exc:
        raise RuleInvalid(f"Unable to parse field JSON path {text}: {exc}") from None


def _condition(entry: Any, index: int) -> tuple[FieldCheck, dict[str, Any]]:
    where = f"condition {index}"
    if not isinstance(entry, dict) or entry.get("op") not in CONDITIONS:
        raise RuleInvalid(
            f"Validation failed for conditions: {where} needs an op, one of {', '.join(CONDITIONS)}"
        )
    op = entry["op"]
    multiple = entry.get("multiple", "any")
    invert = entry.get("invert", False)
    if multiple not in MULTIPLE or not isinstance(invert, bool):
        raise RuleInvalid(
            f"Validation failed for conditions: {where}: multiple is one of "
            f"{', '.join(MULTIPLE)} and invert a boolean"
        )
    scheme, path = _field(entry.get("field"), where)
    params = {k: v for k, v in entry.items() if k not in ("op", "field", "multiple", "invert")}
    params = {k: v for k, v in params.items() if v is not None}
    wanted = () if op == "is-empty" else ("value",)
    problems = []
    missing = [name for name in wanted if name not in params]
    if missing:
        problems.append(f"missing required parameter(s): {', '.join(missing)}")
    unexpected = sorted(set(params) - set(wanted))
    if unexpected:
        problems.append(f"unexpected parameter(s): {', '.join(unexpected)}")
    value = params.get("value")
    if not problems and op in ("matches", "contains"):
        try:
            patterns.compiled(str(value))
        except patterns.PatternError as exc:
            problems.append(f"invalid regular expression: {exc}")
    if not problems and op == "in-net":
        try:
            ipaddress.ip_network(str(value), strict=False)
        except ValueError as exc:
            problems.append(f"invalid value: {exc}")
    if problems:
        raise RuleInvalid(f"Invalid parameters for operator {op}: {'; '.join(problems)}")
    shown = {**entry, "multiple": multiple, "invert": invert}
    return FieldCheck(op, scheme, path, value, invert, str(multiple)), shown


def _action(entry: Any, index: int) -> tuple[Step, dict[str, Any]]:
    if not isinstance(entry, dict) or entry.get("action") not in ACTIONS:
        raise RuleInvalid(
            f"Validation failed for actions: action {index} needs an action, one of "
            f"{', '.join(ACTIONS)}"
        )
    name = entry["action"]
    required, optional = ACTIONS[name]
    params = {k: v for k, v in entry.items() if k != "action"}
    problems = []
    missing = [p for p in required if params.get(p) is None and not (p == "value" and p in params)]
    if missing:
        problems.append(f"missing required parameter(s): {', '.join(missing)}")
    unexpected = sorted(set(params) - set(required) - set(optional))
    if unexpected:
        problems.append(f"unexpected parameter(s): {', '.join(unexpected)}")
    if problems:
        raise RuleInvalid(f"Invalid parameters for action {name}: {'; '.join(problems)}")
    return _engine_action(name, params), dict(entry)


def _engine_action(name: str, params: Mapping[str, Any]) -> Step:
    """The engine's action doing what the inspector's does."""
    if name == "fail":
        return Step("fail", {"msg": str(params["message"])})
    if name == "set-capability":
        if params.get("value") is None:
            return Step("unset-capability", {"name": params["name"]})
        return Step("set-capability", {"name": params["name"], "value": params["value"]})
    if name == "extend-attribute":
        args = {"path": params["path"], "value": params["value"]}
        return Step("extend-attribute", {**args, "unique": bool(params.get("unique", False))})
    if name == "set-attribute":
        return Step("set-attribute", {"path": params["path"], "value": params["value"]})
    return Step(name, {"name": params["name"]})


def parse_rule(body: Mapping[str, Any]) -> Rule:
    """An ironic-inspector rule (``POST /v1/rules``) as the engine runs it."""
    conditions = body.get("conditions") or []
    actions = body.get("actions") or []
    if not isinstance(conditions, list) or not isinstance(actions, list):
        raise RuleInvalid("Validation failed for conditions: conditions and actions are lists")
    if not actions:
        raise RuleInvalid("Validation failed for actions: [] should be non-empty")
    if len(conditions) > MAX_STEPS or len(actions) > MAX_STEPS:
        raise RuleInvalid(f"a rule may have at most {MAX_STEPS} conditions and actions")
    scope = body.get("scope")
    if scope is not None and (not isinstance(scope, str) or len(scope) > 255):
        raise RuleInvalid("Invalid scope: the length of the scope should be within 255 characters")
    description = body.get("description")
    if description is not None and not isinstance(description, str):
        raise RuleInvalid("description must be text")
    checks = [_condition(entry, i) for i, entry in enumerate(conditions, 1)]
    steps = [_action(entry, i) for i, entry in enumerate(actions, 1)]
    uuid = body.get("uuid")
    return Rule(
        uuid=uuid if isinstance(uuid, str) and uuid else None,
        priority=0,
        phase="main",
        description=description,
        sensitive=False,
        conditions=(),
        actions=tuple(step for step, _ in steps),
        shown_conditions=[shown for _, shown in checks],
        shown_actions=[shown for _, shown in steps],
        field_checks=tuple(check for check, _ in checks),
        scope=scope or None,
        dialect="inspector",
    )


def _coerced(found: Any, value: Any) -> Any:
    if isinstance(value, float):
        return float(found)
    if isinstance(value, int):
        return int(found)
    return found


def _in_net(found: Any, subnet: Any) -> bool:
    try:
        return ipaddress.ip_address(str(found)) in ipaddress.ip_network(str(subnet), strict=False)
    except ValueError:
        return False


def _compare(op: str, found: Any, value: Any) -> bool:
    try:
        return OPS[op](_coerced(found, value), value)
    except (TypeError, ValueError):
        return False


_CHECKS: Final[Mapping[str, Callable[[Any, Any], bool]]] = {
    "is-empty": lambda found, _value: found in ("", None, [], {}),
    "in-net": _in_net,
    "matches": lambda found, value: patterns.fullmatch(str(value), str(found)),
    "contains": lambda found, value: patterns.search(str(value), str(found)),
}


def _check(check: FieldCheck, found: Any) -> bool:
    special = _CHECKS.get(check.op)
    if special is not None:
        return special(found, check.value)
    return _compare(check.op, found, check.value)


def holds(check: FieldCheck, data: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether the condition holds; a path that finds nothing does not (but for
    ``is-empty``, which sees it as empty)."""
    values = find(check.path, data if check.scheme == "data" else node)
    if not values:
        if check.op != "is-empty":
            return False
        values = [None]
    result = False
    for found in values:
        result = _check(check, found) != check.invert
        if check.multiple == "first":
            break
        if check.multiple == "all" and not result:
            break
        if check.multiple == "any" and result:
            break
    return result


def render_data(value: Any, data: Mapping[str, Any]) -> Any:
    """``{data[...]}`` in an action's value, resolved as ironic-inspector formats it."""
    return references.render(value, references.Scope({}, {}, {}, data=data))


def introspection_data(
    inventory: Mapping[str, Any], plugin_data: Mapping[str, Any]
) -> dict[str, Any]:
    """The introspection data as ironic-inspector stores and its rules read it: the
    report, the inventory and what its processing adds (``cpus``, ``cpu_arch``,
    ``memory_mb``, ``local_gb``, ``interfaces``, ``all_interfaces``, ``macs``,
    ``ipmi_address``, ``ipmi_v6address``, ``root_disk``, ``boot_interface``).

    Read from the inventory, never from the node's properties, so an operator's later
    edit of a property, or another rule's, does not change what the data says."""
    data = {k: v for k, v in plugin_data.items() if k != "valid_interfaces"}  # "interfaces"
    data["inventory"] = inventory
    data["all_interfaces"] = _interfaces(plugin_data.get("all_interfaces"))
    data["interfaces"] = _interfaces(plugin_data.get("valid_interfaces"))
    data["ipmi_address"] = _known(inventory.get("bmc_address"), ("", "0.0.0.0"))
    data["ipmi_v6address"] = _known(inventory.get("bmc_v6address"), ("", "::/0"))
    cpu = inventory.get("cpu")
    if isinstance(cpu, Mapping):
        count = _whole(cpu.get("count"))
        if count is not None:
            data["cpus"] = count
            if "architecture" in cpu:
                data["cpu_arch"] = str(cpu["architecture"])
    memory = inventory.get("memory")
    if isinstance(memory, Mapping):
        physical = _whole(memory.get("physical_mb"))
        if physical is not None:
            data["memory_mb"] = physical
    return data


def _interfaces(found: Any) -> dict[str, Any]:
    """Interfaces by name as ironic-inspector records them: ``pxe`` where Ironic says
    ``pxe_enabled``."""
    if not isinstance(found, Mapping):
        return {}
    return {
        name: {
            "ip": iface.get("ip"),
            "mac": iface.get("mac"),
            "client_id": iface.get("client_id"),
            "pxe": bool(iface.get("pxe_enabled")),
        }
        for name, iface in found.items()
        if isinstance(iface, Mapping)
    }


def _known(address: Any, unknown: tuple[str, ...]) -> Any:
    """None for what ipmitool answers when it does not know the BMC's address."""
    return None if address in unknown else address


def _whole(value: Any) -> int | None:
    """``value`` as ``int()`` reads it (``"8"``, ``8.0``), or None where it cannot."""
    if not isinstance(value, (bool, int, float, str)):
        return None
    try:
        return int(value)
    except (ValueError, OverflowError):
        return None
