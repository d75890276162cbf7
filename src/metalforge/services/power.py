"""Power requests: recorded on the node and queued for its conductor."""

from __future__ import annotations

from metalforge.conductor import node_work
from metalforge.conductor.flows import catalog
from metalforge.drivers import base as drivers_base
from metalforge.errors import bad_request, conflict
from metalforge.services import fencing, lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version

OFF_TARGETS = frozenset({drivers_base.POWER_OFF, drivers_base.SOFT_POWER_OFF})


def request_power(
    svc: Services,
    ident: str,
    version: Version,
    target: str,
    timeout: int | None,
    actor: str | None,
) -> str:
    """Set the node's target power state and queue the change; returns the node's UUID.

    One change at a time per node (409 while one is pending), never while
    the node's flow drives the power (the spec's power-blocked states).
    """
    with svc.db.write() as session:
        node = lookup.find_node(session, ident, version)
        if node.provision_state not in catalog.POWER_REFUSED_WHILE_LOCKED:
            fencing.check_unlocked(session, node)
        if node.provision_state in catalog.POWER_BLOCKED_STATES:
            raise bad_request(
                f"Power state change is not allowed while node {node.uuid} is in "
                f'state "{node.provision_state}"'
            )
        if node.target_power_state is not None:
            raise conflict(
                f"Node {node.uuid} already has a power change to "
                f"{node.target_power_state} in progress"
            )
        if node.disable_power_off and target in OFF_TARGETS:
            raise bad_request(f"Powering off node {node.uuid} is disabled (disable_power_off)")
        target_state = drivers_base.POWER_OFF if target in OFF_TARGETS else drivers_base.POWER_ON
        fencing.update_node(
            session, node, {"target_power_state": target_state}, race=fencing.REQUEST_RACED
        )
        svc.queue_for(session, node, node_work.POWER, node_work.PowerChange(target, timeout))
        fencing.record(session, node, "power", f"power {target} requested", actor)
    svc.notify()
    return node.uuid
