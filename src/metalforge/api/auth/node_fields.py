"""Which rules a node PATCH needs, and the guard on BMC addresses.

A node's fields are guarded by rules of their own (Ironic's mapping): who
may rename a node is not who may change its BMC credentials. Each operation
is matched on its path's first segment; any operation no specific rule
covers needs ``baremetal:node:update``.

Changing where a node's BMC is (an ``*_address``, ``*_host`` or ``*_port``
key of ``driver_info``) while credentials are stored would send those
credentials to a host of the caller's choosing. So it needs the credentials
given again in the same request, or ``show_password`` (a caller who may
read them anyway).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request

from metalforge.api.auth.access import allows, node_access, require
from metalforge.api.schemas import PatchOperation
from metalforge.errors import RequestError
from metalforge.redaction import is_secret_key
from metalforge.services.values import parse_bool

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
_ADDRESS_SUFFIXES = ("_address", "_host", "_hostname", "_port")


def rule_for(field: str, value: Any) -> str:
    """The rule guarding setting ``field`` (a node field's name) to ``value``."""
    rule = FIELD_RULES.get(field)
    if rule is None and field.endswith("_interface"):
        rule = "baremetal:node:update:driver_interfaces"
    if rule is None and field == "automated_clean" and _turns_off(value):
        rule = "baremetal:node:disable_cleaning"
    return rule or GENERIC_RULE


def rules_for(ops: list[PatchOperation]) -> list[str]:
    """The rules a patch needs, in the order Ironic checks them (an empty patch: the
    generic rule, so that a caller who may change nothing learns that, not a 200)."""
    rules = (rule_for(op.path.lstrip("/").split("/", 1)[0], op.value) for op in ops)
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


def authorize_patch(request: Request, ops: list[PatchOperation]) -> None:
    """403 unless the caller passes every rule the patch needs on this node."""
    target = node_access(request).target
    for rule in rules_for(ops):
        require(request, rule, target)


def _address_keys(driver_info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in driver_info.items() if k.lower().endswith(_ADDRESS_SUFFIXES)}


def check_bmc_redirect(
    request: Request,
    ops: list[PatchOperation],
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
    if not kept:
        return
    if allows(request, "show_password", node_access(request).target):
        return
    old, new = _address_keys(before), _address_keys(after)
    names = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
    raise RequestError(
        403,
        f"Changing {', '.join(names)} of a node with stored credentials needs the "
        f"credentials ({', '.join(sorted(kept))}) given again in the same request.",
    )
