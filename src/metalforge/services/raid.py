"""A node's target RAID configuration: what ``raid.create_configuration`` will build."""

from __future__ import annotations

from typing import Any

from metalforge.db.models import Node
from metalforge.drivers.base import DriverError, NotOffered, RaidInterface, ReadOnlyTask
from metalforge.errors import bad_request, not_acceptable, not_found
from metalforge.services import fencing, lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version, fmt

SINCE: Version = (1, 12)
"""The API microversion that introduced the target RAID configuration."""


def set_target(
    svc: Services, ident: str, version: Version, config: dict[str, Any], actor: str | None
) -> None:
    """Store ``config`` (``{}`` clears it), checked now by the node's RAID interface.

    A bad configuration is refused here rather than failing a clean later.
    """
    with svc.db.write() as session:
        node = lookup.find_node(session, ident, version)  # 404 before 406, as Ironic
        if version < SINCE:
            raise not_acceptable(
                f"Setting a target RAID configuration needs API version {fmt(SINCE)}; "
                f"requested {fmt(version)}"
            )
        fencing.check_unlocked(session, node)
        if config:  # clearing the target is always allowed
            _check(svc, node, config)
        fencing.update_node(session, node, {"target_raid_config": config})
        disks = len(config.get("logical_disks") or [])
        text = f"set, {disks} logical disk(s)" if disks else "cleared"
        fencing.record(session, node, "raid", f"target RAID configuration {text}", actor)


def _check(svc: Services, node: Node, config: dict[str, Any]) -> None:
    try:
        raid = svc.drivers.interface_of(node, RaidInterface, "configure RAID")
    except NotOffered as exc:
        # 404, as Ironic: RAID is an optional interface the driver lacks.
        raise not_found(
            f"Node {node.uuid} cannot configure RAID: its raid interface is {exc.implementation}"
        ) from None
    try:
        raid.validate_raid_config(ReadOnlyTask(node), config)
    except DriverError as exc:
        raise bad_request(f"Invalid target RAID configuration: {exc}") from None


def logical_disk_properties(svc: Services, driver: str, version: Version) -> dict[str, str]:
    """What a logical disk may hold, per the hardware type's default RAID interface.

    A hardware type whose default RAID interface cannot configure RAID
    (``no-raid``) answers 404, as Ironic does for a driver without RAID support.
    """
    if version < SINCE:
        raise not_acceptable(
            f"RAID logical disk properties need API version {fmt(SINCE)}; requested {fmt(version)}"
        )
    if driver not in svc.drivers.types:
        raise not_found(f"Could not find the following driver(s) or hardware type(s): {driver}.")
    raid = svc.drivers.default_interface_of(driver, RaidInterface)
    if raid is None:
        raise not_found(f"Driver {driver} does not support raid (disabled or not implemented).")
    return raid.logical_disk_properties()
