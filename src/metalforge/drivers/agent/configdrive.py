"""The instance's config drive as the agent writes it: a ``config-2`` ISO, gzipped, in base64.

A client may give the config drive ready-made (that string, or a URL the
agent downloads) or, from API 1.56, as JSON (``meta_data``, ``user_data``,
``network_data``, ``vendor_data``), which is what Metal3 sends. The agent
only takes the first form, so JSON is built into the ISO when the image is
written, with openstacksdk's builder (the one Ironic and metalsmith use):
``meta_data`` gets the node's ``uuid`` and ``name`` unless it has its own,
and ``user_data`` given as JSON is written as JSON text.

The agent's own deploy steps (``custom-agent``) get the JSON as it was
given, as Ironic hands it to them: a custom hardware manager reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from metalforge.db.models import Node
from metalforge.drivers.base import StepFailed


def for_image(node: Node) -> str | None:
    """The config drive to write beside the image, or ``None`` when none was given."""
    given = node.instance_info.get("configdrive")
    if not given:
        return None
    if isinstance(given, str):
        return given
    if isinstance(given, dict):
        return build(node, given)
    raise StepFailed(
        f"instance_info.configdrive must be a string or an object, not {type(given).__name__}"
    )


def build(node: Node, drive: Mapping[str, Any]) -> str:
    """A ``config-2`` ISO of ``drive`` (the JSON form), gzipped and base64-encoded."""
    meta_data = _object(drive, "meta_data")
    meta_data.setdefault("uuid", node.uuid)
    if node.name:
        meta_data.setdefault("name", node.name)
    user_data = drive.get("user_data")
    if isinstance(user_data, dict | list):
        user_data = json.dumps(user_data).encode()
    elif isinstance(user_data, str):
        user_data = user_data.encode()
    elif user_data is not None:
        raise StepFailed("instance_info.configdrive user_data must be text, an object or a list")
    # Imported here: openstacksdk brings ~900 modules (a second of start-up) that only
    # a deployment with a JSON config drive needs.
    from openstack.baremetal import configdrive as sdk_configdrive

    try:
        return sdk_configdrive.build(
            meta_data,
            user_data=user_data or None,
            network_data=_object(drive, "network_data") or None,
            vendor_data=_object(drive, "vendor_data") or None,
        )
    except (RuntimeError, OSError) as exc:
        raise StepFailed(f"the config drive could not be built: {exc}") from None


def _object(drive: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = drive.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StepFailed(f"instance_info.configdrive {key} must be an object")
    return dict(value)
