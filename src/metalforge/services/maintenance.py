"""Maintenance mode: set and cleared by operators, fenced like every node write.

A node a conductor holds answers 409 (after the API's short lock wait):
maintenance turned on under a running step would not stop it, and the flow
would then finish on a node the operator believes is set aside.
"""

from __future__ import annotations

from typing import Any

from metalforge.services import fencing, lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version


def set_maintenance(
    svc: Services,
    ident: str,
    version: Version,
    *,
    on: bool,
    reason: str | None,
    actor: str | None,
) -> None:
    """Turn maintenance on (with ``reason``) or off (clearing reason and fault)."""
    with svc.db.write() as session:
        node = lookup.find_node(session, ident, version, for_update=True)
        fencing.check_unlocked(session, node)
        changes: dict[str, Any] = {"maintenance": on, "maintenance_reason": reason if on else None}
        if not on:
            changes["fault"] = None
        fencing.update_node(session, node, changes)
        note = f"maintenance on: {reason}" if on else "maintenance off"
        fencing.record(session, node, "maintenance", note, actor)
