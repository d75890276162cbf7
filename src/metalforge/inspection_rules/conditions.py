"""The conditions' operators: each takes its arguments by name and answers a boolean.

Their meaning is Ironic's: ``eq``/``lt``/``gt`` compare each neighbouring
pair of ``values`` (fewer than two values: true); ``matches`` is a full match
of the regular expression and ``contains`` a search, both on the value as
text; ``is-empty`` is true for nothing, ``""``, ``[]`` and ``{}`` (and what
the inspection lacks); ``is-true``/``is-false`` read booleans, numbers and
``yes``/``true``/``no``/``false``.
"""

from __future__ import annotations

import ipaddress
import itertools
import operator
from collections.abc import Callable, Mapping
from typing import Any, Final

from metalforge.inspection_rules import patterns

Condition = Callable[[Mapping[str, Any]], bool]


class ConditionError(ValueError):
    """The condition cannot be evaluated on this inspection (a bad pattern or subnet)."""


_MAX_PATTERN_INPUT: Final = 65536
"""Characters of a value a pattern is matched against (a report cannot make it slow)."""


def _compare(compare: Callable[[Any, Any], bool]) -> Condition:
    def check(args: Mapping[str, Any]) -> bool:
        values = args["values"]
        if not isinstance(values, list):
            raise ConditionError(f"values must be a list, not {values!r}")
        if args.get("force_strings"):
            values = [str(v) for v in values]
        elif any(isinstance(v, str) for v in values) and any(_number(v) for v in values):
            # References render as text: "65536" against 131072 compares as numbers.
            values = [_as_number(v) for v in values]
        try:
            return all(compare(a, b) for a, b in itertools.pairwise(values))
        except TypeError as exc:
            raise ConditionError(f"cannot compare {values!r}: {exc}") from None

    return check


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_number(value: Any) -> Any:
    """A numeric text as its number; anything else as it is."""
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                continue
    return value


def _is_empty(args: Mapping[str, Any]) -> bool:
    return str(args["value"]) in ("", "None", "[]", "{}")


def _is_true(args: Mapping[str, Any]) -> bool:
    value = args["value"]
    if isinstance(value, (bool, int, float)):
        return bool(value)
    return isinstance(value, str) and value.lower() in ("yes", "true")


def _is_false(args: Mapping[str, Any]) -> bool:
    value = args["value"]
    if isinstance(value, (bool, int, float)):
        return not value
    if isinstance(value, str):
        return value.lower() in ("no", "false")
    return value is None


def _in_net(args: Mapping[str, Any]) -> bool:
    try:
        network = ipaddress.ip_network(str(args["subnet"]), strict=False)
    except ValueError:
        raise ConditionError(f"invalid subnet {args['subnet']!r}") from None
    try:
        address = ipaddress.ip_address(str(args["address"]))
    except ValueError:
        return False  # a report's address that is none is simply not in the subnet
    return address in network


def _pattern(args: Mapping[str, Any]) -> Any:
    try:
        return patterns.compiled(str(args["regex"]))
    except patterns.PatternError as exc:
        raise ConditionError(f"invalid regular expression {args['regex']!r}: {exc}") from None


def _matches(args: Mapping[str, Any]) -> bool:
    return _pattern(args).fullmatch(str(args["value"])[:_MAX_PATTERN_INPUT]) is not None


def _contains(args: Mapping[str, Any]) -> bool:
    return _pattern(args).search(str(args["value"])[:_MAX_PATTERN_INPUT]) is not None


def _one_of(args: Mapping[str, Any]) -> bool:
    values = args["values"]
    if not isinstance(values, list):
        raise ConditionError(f"values must be a list, not {values!r}")
    return args["value"] in values


OPERATORS: Final[Mapping[str, Condition]] = {
    "eq": _compare(operator.eq),
    "lt": _compare(operator.lt),
    "gt": _compare(operator.gt),
    "is-empty": _is_empty,
    "is-none": lambda args: args["value"] is None,
    "is-true": _is_true,
    "is-false": _is_false,
    "in-net": _in_net,
    "matches": _matches,
    "contains": _contains,
    "one-of": _one_of,
}
"""Every condition operator, by the name rules use (``grammar.CONDITIONS`` declares
their arguments)."""
