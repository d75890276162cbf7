"""A node PATCH: what it may touch, who may touch what, and the values it leaves.

``PATCH`` lists the fields a patch may change, from the microversion each
appeared in (``traits`` has a refusal of its own: they have their own API).
A node's fields are guarded by rules of their own (Ironic's mapping): who
may rename a node is not who may change its BMC credentials. Each operation
is matched on its path's first segment; any operation no specific rule
covers needs ``baremetal:node:update``. The caller is asked on the node as
the write's transaction read it.

Changing where a node's BMC is (an ``*_address``, ``*_host`` or ``*_port``
key of ``driver_info``) while credentials are stored would send those
credentials to a host of the caller's choosing. So it needs the credentials
given again in the same request, or ``show_password`` (a caller who may
read them anyway).

The patched values are held to create's types and lengths
(``bodies.NodeCreate``); the rules between fields and against the node's
state are ``services.nodes``'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metalforge.db.models import INTERFACES, Node
from metalforge.errors import RequestError, bad_request
from metalforge.redaction import is_secret_key
from metalforge.services.bodies import NodeCreate, max_lengths
from metalforge.services.caller import Caller, NodeTarget
from metalforge.services.node_fields import NODE_FIELDS
from metalforge.services.patching import Operation, Patchable, PatchPolicy, apply
from metalforge.services.values import parse_bool

_PATCHABLE = (
    "automated_clean",
    "chassis_uuid",
    "conductor_group",
    "description",
    "disable_power_off",
    "driver",
    "driver_info",
    "extra",
    "instance_info",
    "instance_name",
    "instance_uuid",
    "lessee",
    "maintenance",
    "name",
    "network_data",
    "owner",
    "parent_node",
    "properties",
    "protected",
    "protected_reason",
    "resource_class",
    "retired",
    "retired_reason",
    "shard",
    *(f"{family}_interface" for family in INTERFACES),
)
"""The node fields a PATCH may change, each from the version ``NODE_FIELDS`` gives it."""

PATCH = PatchPolicy(
    {name: Patchable(since=NODE_FIELDS[name]) for name in _PATCHABLE},
    refusals={
        "traits": "Cannot update node traits via node patch. Node traits should "
        "be updated via the node traits API."
    },
)
"""What a JSON patch may change, from the microversion each field appeared in (the
version the node's view shows it from)."""

DICT_FIELDS = frozenset({"driver_info", "extra", "instance_info", "network_data", "properties"})
BOOL_FIELDS = frozenset(
    {"automated_clean", "disable_power_off", "maintenance", "protected", "retired"}
)
NULLABLE_BOOL = frozenset({"automated_clean"})
MAX_LENGTHS = max_lengths(NodeCreate)
"""PATCH holds strings to the limits create does (and the columns need)."""

FIELD_RULES: dict[str, str] = {
    "instance_info": "baremetal:node:update_instance_info",
    "instance_name": "baremetal:node:update_instance_info",
    "extra": "baremetal:node:update_extra",
    "driver_info": "baremetal:node:update:driver_info",
    "properties": "baremetal:node:update:properties",
    "chassis_uuid": "baremetal:node:update:chassis_uuid",
    "instance_uuid": "baremetal:node:update:instance_uuid",
    "lessee": "baremetal:node:update:lessee",
    "owner": "baremetal:node:update:owner",
    "driver": "baremetal:node:update:driver_interfaces",
    "network_data": "baremetal:node:update:network_data",
    "conductor_group": "baremetal:node:update:conductor_group",
    "name": "baremetal:node:update:name",
    "retired": "baremetal:node:update:retired",
    "retired_reason": "baremetal:node:update:retired",
    "shard": "baremetal:node:update:shard",
    "parent_node": "baremetal:node:update:parent_node",
    "disable_power_off": "baremetal:node:update:disable_power_off",
}
"""The rule guarding each field a PATCH may change; others need ``baremetal:node:update``."""
GENERIC_RULE = "baremetal:node:update"
SHOW_PASSWORD = "show_password"
"""Who may read a node's BMC credentials may also move its BMC keeping them."""
_ADDRESS_SUFFIXES = ("_address", "_host", "_hostname", "_port")


def rule_for(field: str, value: Any) -> str:
    """The rule guarding setting ``field`` (a node field's name) to ``value``."""
    rule = FIELD_RULES.get(field)
    if rule is None and field.endswith("_interface"):
        rule = "baremetal:node:update:driver_interfaces"
    if rule is None and field == "automated_clean" and _turns_off(value):
        rule = "baremetal:node:disable_cleaning"
    return rule or GENERIC_RULE


def rules_for(ops: Sequence[Operation]) -> list[str]:
    """The rules a patch needs, in the order Ironic checks them (an empty patch: the
    generic rule, so that a caller who may change nothing learns that, not a 200)."""
    rules = (rule_for(op.root, op.value) for op in ops)
    return list(dict.fromkeys(rules)) or [GENERIC_RULE]


def rules_for_values(values: Mapping[str, Any]) -> list[str]:
    """The field rules that setting ``values`` (a create's fields) needs, generic rule aside."""
    rules = (rule_for(name, value) for name, value in values.items())
    return [rule for rule in dict.fromkeys(rules) if rule != GENERIC_RULE]


def _turns_off(value: Any) -> bool:
    """Whether ``value`` sets ``automated_clean`` to false, in any spelling the API accepts."""
    if value is False:
        return True
    if isinstance(value, str):
        try:
            return parse_bool("automated_clean", value) is False
        except RequestError:
            return False  # refused later as not a boolean
    return False


def changes(node: Node, ops: Sequence[Operation], caller: Caller) -> dict[str, Any]:
    """The fields ``ops`` change on ``node`` (already checked against ``PATCH``): 403 unless
    the caller passes every rule the patch needs on the node, then the values checked."""
    target = NodeTarget.of(node)
    for rule in rules_for(ops):
        caller.require(rule, target)
    before = {name: getattr(node, name) for name in PATCH.fields}
    after = apply(before, ops)
    if isinstance(after.get("driver_info"), dict):
        _check_bmc_redirect(caller, target, ops, before["driver_info"], after["driver_info"])
    changed = _normalised(before, after)
    return {**changed, **_instance_name_from_display_name(node, changed)}


def _instance_name_from_display_name(node: Node, changed: Mapping[str, Any]) -> dict[str, Any]:
    """``instance_name`` taken from ``instance_info.display_name`` when a patch changes
    ``instance_info`` and leaves the node without a name, as Ironic does: clients that
    name instances the older way (Nova, Metal3) still fill the newer field."""
    if "instance_info" not in changed:
        return {}
    name = changed.get("instance_name", node.instance_name)
    display_name = changed["instance_info"].get("display_name")
    if name or not isinstance(display_name, str) or not display_name:
        return {}
    return {"instance_name": display_name[: MAX_LENGTHS.get("instance_name", 255)]}


def _address_keys(driver_info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in driver_info.items() if k.lower().endswith(_ADDRESS_SUFFIXES)}


def _check_bmc_redirect(
    caller: Caller,
    target: NodeTarget,
    ops: Sequence[Operation],
    before: Mapping[str, Any],
    after: Mapping[str, Any],
) -> None:
    """403 when a patch moves the BMC while keeping credentials it did not give again."""
    if _address_keys(before) == _address_keys(after):
        return
    stored = [k for k, v in before.items() if is_secret_key(k) and v not in (None, "")]
    if not stored:
        return
    written = {op.path.rstrip("/") for op in ops if op.op in ("add", "replace")}
    kept = [
        key
        for key in stored
        if key in after and f"/driver_info/{key}" not in written and "/driver_info" not in written
    ]
    if not kept or caller.may(SHOW_PASSWORD, target):
        return
    old, new = _address_keys(before), _address_keys(after)
    names = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
    raise RequestError(
        403,
        f"Changing {', '.join(names)} of a node with stored credentials needs the "
        f"credentials ({', '.join(sorted(kept))}) given again in the same request.",
    )


def _normalised(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Changed values, with removed fields reset and types checked."""
    changed: dict[str, Any] = {}
    for name in PATCH.fields:
        value = after.get(name)
        if name in DICT_FIELDS:
            value = {} if value is None else value
            if not isinstance(value, dict):
                raise bad_request(f"Invalid value for {name}: must be a JSON object")
        elif name in BOOL_FIELDS:
            value = _flag(name, value)
        elif value is not None and not isinstance(value, str):
            raise bad_request(f"Invalid value for {name}: must be a string")
        elif value is not None and len(value) > MAX_LENGTHS.get(name, len(value)):
            raise bad_request(
                f"Invalid value for {name}: at most {MAX_LENGTHS[name]} characters are allowed"
            )
        if name == "conductor_group" and value is None:
            value = ""
        if value != before.get(name):
            changed[name] = value
    return changed


def _flag(name: str, value: Any) -> bool | None:
    """A boolean field after the patch: a removed one is false (``automated_clean``: none,
    the configured default), and the strings clients send are read as booleans."""
    if value is None and name not in NULLABLE_BOOL:
        value = False
    if isinstance(value, str):
        # `baremetal node set --protected` sends "True": Ironic accepts strings here.
        value = parse_bool(name, value)
    if value is not None and not isinstance(value, bool):
        raise bad_request(f"Invalid value for {name}: must be a boolean")
    return value
