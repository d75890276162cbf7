"""How a node looks on the wire, at each microversion.

``NODE_FIELDS`` says from which microversion each field exists; fields newer
than the request's version are left out. Secrets are masked; the default
list shows only Ironic's six fields.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from metalforge.api.links import links, sub_links
from metalforge.api.versions import Version
from metalforge.db.models import Node

NODE_FIELDS: dict[str, Version] = {
    "uuid": (1, 1),
    "chassis_uuid": (1, 1),
    "console_enabled": (1, 1),
    "created_at": (1, 1),
    "updated_at": (1, 1),
    "driver": (1, 1),
    "driver_info": (1, 1),
    "extra": (1, 1),
    "instance_info": (1, 1),
    "instance_uuid": (1, 1),
    "last_error": (1, 1),
    "maintenance": (1, 1),
    "maintenance_reason": (1, 1),
    "power_state": (1, 1),
    "target_power_state": (1, 1),
    "provision_state": (1, 1),
    "target_provision_state": (1, 1),
    "provision_updated_at": (1, 1),
    "properties": (1, 1),
    "reservation": (1, 1),
    "driver_internal_info": (1, 3),
    "name": (1, 5),
    "inspection_started_at": (1, 6),
    "inspection_finished_at": (1, 6),
    "clean_step": (1, 7),
    "raid_config": (1, 12),
    "target_raid_config": (1, 12),
    "network_interface": (1, 20),
    "resource_class": (1, 21),
    "boot_interface": (1, 31),
    "console_interface": (1, 31),
    "deploy_interface": (1, 31),
    "inspect_interface": (1, 31),
    "management_interface": (1, 31),
    "power_interface": (1, 31),
    "raid_interface": (1, 31),
    "vendor_interface": (1, 31),
    "storage_interface": (1, 33),
    "traits": (1, 37),
    "rescue_interface": (1, 38),
    "bios_interface": (1, 40),
    "fault": (1, 42),
    "deploy_step": (1, 44),
    "conductor_group": (1, 46),
    "automated_clean": (1, 47),
    "protected": (1, 48),
    "protected_reason": (1, 48),
    "conductor": (1, 49),
    "owner": (1, 50),
    "description": (1, 51),
    "allocation_uuid": (1, 52),
    "retired": (1, 61),
    "retired_reason": (1, 61),
    "lessee": (1, 65),
    "network_data": (1, 66),
    "boot_mode": (1, 75),
    "secure_boot": (1, 75),
    "shard": (1, 82),
    "parent_node": (1, 83),
    "firmware_interface": (1, 86),
    "service_step": (1, 87),
    "disable_power_off": (1, 95),
    "instance_name": (1, 104),
    "health": (1, 109),
}
"""Every node field and the microversion that introduced it."""

LINK_FIELDS: dict[str, Version] = {
    "ports": (1, 1),
    "states": (1, 14),
    "portgroups": (1, 24),
    "volume": (1, 32),
}
"""Sub-resource link lists shown on full node views."""

SELECTABLE_FIELDS: dict[str, Version] = {**NODE_FIELDS, **LINK_FIELDS, "links": (1, 1)}

LIST_FIELDS = ("uuid", "name", "instance_uuid", "power_state", "provision_state", "maintenance")
"""What ``GET /v1/nodes`` shows without ``fields`` or ``detail`` (plus ``links``)."""

MASK = "******"
_SECRET_MARKERS = ("password", "secret", "token", "private_key", "passphrase")


def mask_secrets(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` with every secret-looking value replaced by ``******``."""
    return {
        key: MASK
        if value not in (None, "") and any(m in key.lower() for m in _SECRET_MARKERS)
        else value
        for key, value in data.items()
    }


def _instance_info(node: Node) -> dict[str, Any]:
    info = mask_secrets(node.instance_info)
    if info.get("configdrive"):
        info["configdrive"] = MASK
    return info


def _iso(value: Any) -> Any:
    return value.isoformat() if value is not None else None


_COMPUTED: dict[str, Callable[[Node], Any]] = {
    "driver_info": lambda n: mask_secrets(n.driver_info),
    "driver_internal_info": lambda n: mask_secrets(n.driver_internal_info),
    "instance_info": _instance_info,
    "created_at": lambda n: _iso(n.created_at),
    "updated_at": lambda n: _iso(n.updated_at),
    "provision_updated_at": lambda n: _iso(n.provision_updated_at),
    "inspection_started_at": lambda n: _iso(n.inspection_started_at),
    "inspection_finished_at": lambda n: _iso(n.inspection_finished_at),
    "traits": lambda n: [t.trait for t in n.traits],
    "allocation_uuid": lambda n: None,
    "health": lambda n: None,
}


def visible_fields(version: Version) -> list[str]:
    return [name for name, since in NODE_FIELDS.items() if since <= version]


def node_view(
    node: Node,
    version: Version,
    base: str,
    *,
    fields: Sequence[str] | None = None,
    list_view: bool = False,
    conductor: Callable[[Node], str | None] | None = None,
) -> dict[str, Any]:
    """The JSON object for ``node``: full, the short list form, or only ``fields``."""
    if fields is not None:
        wanted = list(fields)
    elif list_view:
        # ``name`` is one of the six but only exists from 1.5.
        wanted = [name for name in LIST_FIELDS if NODE_FIELDS[name] <= version]
    else:
        wanted = [*visible_fields(version), *(k for k, v in LINK_FIELDS.items() if v <= version)]
    body: dict[str, Any] = {}
    for name in wanted:
        if name in LINK_FIELDS:
            body[name] = sub_links(base, "nodes", node.uuid, name)
        elif name == "links":
            continue
        elif name == "conductor":
            body[name] = conductor(node) if conductor else None
        elif name in _COMPUTED:
            body[name] = _COMPUTED[name](node)
        else:
            body[name] = getattr(node, name)
    if version < (1, 2) and body.get("provision_state") == "available":
        body["provision_state"] = None
    if version < (1, 39) and body.get("provision_state") == "inspect wait":
        body["provision_state"] = "inspecting"
    body["links"] = links(base, "nodes", node.uuid)
    return body
