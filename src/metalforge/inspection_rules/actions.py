"""The actions' operators: each changes the ``Subject`` (and nothing else).

The subject is what one inspection may change: the node's free-form
documents, text fields and driver (``grammar.NODE_FIELDS_SET``), its traits and
capabilities, its ports' ``extra``-like fields, and the plugin data stored
with the inspection. The inspection flow writes the subject back in its own
transaction, so a rule's changes are written with the inspection's or not
at all. ``fail`` ends the inspection; ``log`` writes to the node's history.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from metalforge.inspection_rules.grammar import (
    NODE_DICT_FIELDS,
    NODE_DRIVER_FIELDS,
    NODE_TEXT_FIELDS,
    RuleInvalid,
    check_node_path,
    split_path,
)

MAX_LIST: Final = 1000
"""Items a list an action extends may reach (a rule run on every inspection cannot grow
a node's document without bound)."""
MAX_TRAITS: Final = 50
"""A node's traits, as the API allows."""
TRAIT_LENGTH: Final = 255
TEXT_LENGTH: Final = 255
PORT_FIELDS: Final = frozenset(
    {"extra", "local_link_connection", "physical_network", "pxe_enabled", "is_smartnic"}
)
"""What an action may change on a port (never its address or its node)."""


class ActionError(ValueError):
    """The action cannot be done on this inspection's subject; the message says why."""


class InspectionFailed(Exception):
    """A ``fail`` action: the inspection ends in failure with this message."""


@dataclass
class Subject:
    """What rules read and change on one inspection."""

    node: dict[str, Any]
    """The node's fields a rule may read (``references.NODE_READABLE``), changed in place."""
    traits: list[str]
    ports: dict[str, dict[str, Any]]
    """The node's ports by UUID, each with its MAC as ``address``."""
    inventory: Mapping[str, Any]
    plugin_data: dict[str, Any]
    changed_fields: set[str] = field(default_factory=set)
    changed_ports: set[str] = field(default_factory=set)
    log: list[tuple[str, str]] = field(default_factory=list)
    """``(level, message)`` lines for the node's history."""


Action = Callable[[Subject, Mapping[str, Any]], None]


def _container_for(root: Any, keys: list[str], what: str) -> dict[str, Any]:
    """The object holding the last key, objects created along the way."""
    if not isinstance(root, dict):
        raise ActionError(f"{what}: not an object")
    holder: dict[str, Any] = root
    for key in keys[:-1]:
        nxt = holder.get(key)
        if nxt is None:
            nxt = holder[key] = {}
        if not isinstance(nxt, dict):
            raise ActionError(f"{what}: {key} is not an object")
        holder = nxt
    return holder


def _node_keys(subject: Subject, path: Any) -> list[str]:
    if not isinstance(path, str) or "{" in path or "}" in path:
        raise ActionError(f"path {path!r} does not name a node field")
    try:
        keys = check_node_path(path, "path")
    except RuleInvalid as exc:
        raise ActionError(str(exc)) from None
    subject.changed_fields.add(keys[0])
    return keys


def _set_attribute(subject: Subject, args: Mapping[str, Any]) -> None:
    keys = _node_keys(subject, args["path"])
    value = copy.deepcopy(args["value"])
    if len(keys) == 1:
        _set_whole_field(subject, keys[0], value)
        return
    _container_for(subject.node.setdefault(keys[0], {}), keys[1:], args["path"])[keys[-1]] = value


def _set_whole_field(subject: Subject, name: str, value: Any) -> None:
    if name in NODE_DICT_FIELDS and not isinstance(value, dict):
        raise ActionError(f"{name} must be set to an object")
    too_long = not isinstance(value, str) or len(value) > TEXT_LENGTH
    if name in NODE_TEXT_FIELDS | NODE_DRIVER_FIELDS and value is not None and too_long:
        raise ActionError(f"{name} must be set to text of at most {TEXT_LENGTH} characters")
    if name == "driver" and not value:
        raise ActionError("driver must be set to the name of a hardware type")
    subject.node[name] = value


def _extend(target: Any, value: Any, unique: Any, what: str) -> list[Any]:
    if target is None:
        target = []
    if not isinstance(target, list):
        raise ActionError(f"{what} is not a list")
    if unique and value in target:
        return target
    if len(target) >= MAX_LIST:
        raise ActionError(f"{what} already has {MAX_LIST} items")
    target.append(copy.deepcopy(value))
    return target


def _extend_attribute(subject: Subject, args: Mapping[str, Any]) -> None:
    keys = _node_keys(subject, args["path"])
    if len(keys) == 1:
        raise ActionError(f"{keys[0]} is not a list")
    holder = _container_for(subject.node.setdefault(keys[0], {}), keys[1:], args["path"])
    holder[keys[-1]] = _extend(holder.get(keys[-1]), args["value"], args["unique"], args["path"])


def _del_attribute(subject: Subject, args: Mapping[str, Any]) -> None:
    keys = _node_keys(subject, args["path"])
    if len(keys) == 1:
        if keys[0] == "driver":
            raise ActionError("a node's driver cannot be removed")
        subject.node[keys[0]] = {} if keys[0] in NODE_DICT_FIELDS else None
        return
    holder: Any = subject.node.get(keys[0])
    for key in keys[1:-1]:
        holder = holder.get(key) if isinstance(holder, dict) else None
    if not isinstance(holder, dict) or keys[-1] not in holder:
        raise ActionError(f"{args['path']} does not exist")
    del holder[keys[-1]]


def _capabilities(subject: Subject) -> dict[str, str]:
    """The node's ``properties.capabilities`` (``key:value,key:value``) as pairs."""
    raw = subject.node.setdefault("properties", {}).get("capabilities") or ""
    pairs: dict[str, str] = {}
    for part in str(raw).split(","):
        name, sep, value = part.partition(":")
        if sep and name:
            pairs[name] = value
    return pairs


def _store_capabilities(subject: Subject, pairs: dict[str, str]) -> None:
    subject.changed_fields.add("properties")
    subject.node["properties"]["capabilities"] = ",".join(f"{k}:{v}" for k, v in pairs.items())


def _set_capability(subject: Subject, args: Mapping[str, Any]) -> None:
    name, value = str(args["name"]), str(args["value"])
    if not name or any(c in name + value for c in ",:"):
        raise ActionError(f"a capability cannot contain ',' or ':' ({name}:{value})")
    pairs = _capabilities(subject)
    pairs[name] = value
    _store_capabilities(subject, pairs)


def _unset_capability(subject: Subject, args: Mapping[str, Any]) -> None:
    pairs = _capabilities(subject)
    if pairs.pop(str(args["name"]), None) is not None:
        _store_capabilities(subject, pairs)


def _add_trait(subject: Subject, args: Mapping[str, Any]) -> None:
    name = str(args["name"])
    if not name or len(name) > TRAIT_LENGTH or not name.isprintable():
        raise ActionError(f"{name!r} is not a trait")
    if name in subject.traits:
        return
    if len(subject.traits) >= MAX_TRAITS:
        raise ActionError(f"the node already has {MAX_TRAITS} traits")
    subject.traits.append(name)
    subject.changed_fields.add("traits")


def _remove_trait(subject: Subject, args: Mapping[str, Any]) -> None:
    name = str(args["name"])
    if name in subject.traits:
        subject.traits.remove(name)
        subject.changed_fields.add("traits")
    else:
        subject.log.append(("warning", f"trait {name} to remove is not on the node"))


def _plugin_keys(args: Mapping[str, Any]) -> list[str]:
    keys = split_path(str(args["path"]))
    if not keys:
        raise ActionError("path must name a key")
    return keys


def _set_plugin_data(subject: Subject, args: Mapping[str, Any]) -> None:
    keys = _plugin_keys(args)
    holder = _container_for(subject.plugin_data, keys, str(args["path"]))
    holder[keys[-1]] = copy.deepcopy(args["value"])


def _extend_plugin_data(subject: Subject, args: Mapping[str, Any]) -> None:
    keys = _plugin_keys(args)
    holder = _container_for(subject.plugin_data, keys, str(args["path"]))
    holder[keys[-1]] = _extend(holder.get(keys[-1]), args["value"], args["unique"], args["path"])


def _unset_plugin_data(subject: Subject, args: Mapping[str, Any]) -> None:
    keys = _plugin_keys(args)
    holder: Any = subject.plugin_data
    for key in keys[:-1]:
        holder = holder.get(key) if isinstance(holder, dict) else None
    if isinstance(holder, dict) and keys[-1] in holder:
        del holder[keys[-1]]
    else:
        subject.log.append(("warning", f"plugin data {args['path']} to unset does not exist"))


def _port(subject: Subject, args: Mapping[str, Any]) -> tuple[str, dict[str, Any], list[str]]:
    """The port an action names (by UUID or MAC) and the keys of its path."""
    ident = str(args["port_id"]).lower()
    found = subject.ports.get(ident)
    if found is None:
        found = next((p for p in subject.ports.values() if p.get("address") == ident), None)
    if found is None:
        raise ActionError(f"the node has no port {args['port_id']}")
    keys = split_path(str(args["path"]))
    if not keys or keys[0] not in PORT_FIELDS:
        raise ActionError(
            f"a rule cannot change a port's {keys[0] if keys else 'nothing'}; it may change "
            f"{', '.join(sorted(PORT_FIELDS))}"
        )
    uuid = str(found["uuid"])
    subject.changed_ports.add(uuid)
    return uuid, found, keys


_PORT_TYPES: Final[Mapping[str, Callable[[Any], bool]]] = {
    "extra": lambda v: isinstance(v, dict),
    "local_link_connection": lambda v: isinstance(v, dict),
    "physical_network": lambda v: v is None or (isinstance(v, str) and len(v) <= 64),
    "pxe_enabled": lambda v: isinstance(v, bool),
    "is_smartnic": lambda v: isinstance(v, bool),
}


def _set_port_attribute(subject: Subject, args: Mapping[str, Any]) -> None:
    _, port, keys = _port(subject, args)
    value = copy.deepcopy(args["value"])
    if len(keys) == 1:
        if not _PORT_TYPES[keys[0]](value):
            raise ActionError(f"{value!r} is not a valid {keys[0]} for a port")
        port[keys[0]] = value
        return
    if not isinstance(port.get(keys[0]), dict):
        raise ActionError(f"a port's {keys[0]} is not an object")
    _container_for(port.setdefault(keys[0], {}), keys[1:], str(args["path"]))[keys[-1]] = value


def _extend_port_attribute(subject: Subject, args: Mapping[str, Any]) -> None:
    _, port, keys = _port(subject, args)
    if len(keys) == 1:
        raise ActionError(f"{keys[0]} is not a list")
    holder = _container_for(port.setdefault(keys[0], {}), keys[1:], str(args["path"]))
    holder[keys[-1]] = _extend(holder.get(keys[-1]), args["value"], args["unique"], args["path"])


def _del_port_attribute(subject: Subject, args: Mapping[str, Any]) -> None:
    _, port, keys = _port(subject, args)
    holder: Any = port
    for key in keys[:-1]:
        holder = holder.get(key) if isinstance(holder, dict) else None
    if not isinstance(holder, dict) or keys[-1] not in holder:
        raise ActionError(f"port attribute {args['path']} does not exist")
    if len(keys) == 1:
        holder[keys[-1]] = {} if isinstance(holder[keys[-1]], dict) else None
    else:
        del holder[keys[-1]]


def _fail(_subject: Subject, args: Mapping[str, Any]) -> None:
    raise InspectionFailed(str(args["msg"]))


def _log(subject: Subject, args: Mapping[str, Any]) -> None:
    subject.log.append((str(args["level"]).lower(), str(args["msg"])))


OPERATORS: Final[Mapping[str, Action]] = {
    "fail": _fail,
    "log": _log,
    "set-attribute": _set_attribute,
    "extend-attribute": _extend_attribute,
    "del-attribute": _del_attribute,
    "set-capability": _set_capability,
    "unset-capability": _unset_capability,
    "add-trait": _add_trait,
    "remove-trait": _remove_trait,
    "set-plugin-data": _set_plugin_data,
    "extend-plugin-data": _extend_plugin_data,
    "unset-plugin-data": _unset_plugin_data,
    "set-port-attribute": _set_port_attribute,
    "extend-port-attribute": _extend_port_attribute,
    "del-port-attribute": _del_port_attribute,
}
"""Every action operator a rule may use (``grammar.ACTIONS`` declares their arguments;
``api-call`` is refused there)."""
