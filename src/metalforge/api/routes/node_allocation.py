"""What a node PATCH does to the node's allocation.

An allocation and its node's ``instance_uuid`` are one fact seen from two
sides, so removing the ``instance_uuid`` by hand deletes the allocation in
the same transaction (refused while the node is deployed or in a state that
allows no update, unless it is in maintenance). Setting ``instance_uuid``
never creates one: a node with a different ``instance_uuid`` is refused by
the patch rules already.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from metalforge import states
from metalforge.conductor import allocations
from metalforge.db.models import Node
from metalforge.errors import conflict


def release_for_patch(session: Session, node: Node, changes: dict[str, Any]) -> None:
    """Delete ``node``'s allocation when ``changes`` remove its ``instance_uuid``."""
    if node.allocation_id is None or changes.get("instance_uuid") is not None:
        return
    held = states.keeps_its_allocation(node.provision_state, node.target_provision_state)
    if held and not node.maintenance:
        raise conflict(
            f"Cannot remove the instance_uuid of node {node.uuid} in provision state "
            f"{node.provision_state}: it belongs to an allocation. Undeploy the node or set "
            "it into maintenance mode first."
        )
    allocations.delete_allocation(session, node.allocation_id)
    changes["allocation_id"] = None
