"""Enrolling, updating and deleting nodes.

The API parses and authorizes the route (the owner a project administrator's
node gets); these functions hold the rules a node's values must follow, the
fencing of every write and its history. A PATCH comes as its operations:
which fields it may touch and who may touch them are ``node_patch``'s.
"""

from __future__ import annotations

import functools
import uuid as uuidlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from sqlalchemy import Insert, Row, Table, delete, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.conductor import allocation_work, history
from metalforge.conductor.flows.guards import refuse_if_protected
from metalforge.db.models import INTERFACES, Node, NodeTrait, Port, Portgroup, utcnow
from metalforge.drivers import ipxe
from metalforge.drivers.base import DriverError
from metalforge.drivers.hardware import UnknownDriver
from metalforge.errors import RequestError, bad_request, conflict, not_acceptable
from metalforge.services import allocations, chassis, fencing, lookup, node_patch, volume
from metalforge.services.caller import Caller
from metalforge.services.context import Services
from metalforge.services.microversion import Version
from metalforge.services.patching import Operation

INTERFACE_FIELDS = frozenset(f"{f}_interface" for f in INTERFACES)
DICT_DEFAULTS = ("driver_info", "extra", "instance_info", "properties", "network_data")

R = TypeVar("R")


# -- values --------------------------------------------------------------------


def check_driver(svc: Services, driver: str, values: dict[str, Any]) -> dict[str, str]:
    """The interface names the node gets: the ones asked for, or the driver's defaults."""
    try:
        return svc.drivers.resolve_interface_names(
            driver, {f: values.get(f"{f}_interface") for f in INTERFACES}
        )
    except UnknownDriver as exc:
        if driver not in svc.drivers.types:
            raise bad_request(
                f"No valid host was found. Reason: No conductor service registered which "
                f"supports driver {driver} for conductor group "
                f'"{values.get("conductor_group") or ""}". Ensure the driver is valid and enabled.'
            ) from None
        raise bad_request(str(exc)) from None


def check_driver_settings(svc: Services, driver: str, info: object) -> None:
    """The driver's settings in ``info`` have their types and ranges (400 naming the one
    that does not): a stored value must not be able to hold a conductor's worker."""
    hardware = svc.drivers.types.get(driver)
    if hardware is None or hardware.check_settings is None or not isinstance(info, dict):
        return
    try:
        hardware.check_settings(info)
    except DriverError as exc:
        raise bad_request(str(exc)) from None


def check_values(values: dict[str, Any]) -> None:
    """Names, UUIDs and the conductor group, normalised in place."""
    if values.get("name") is not None:
        lookup.check_name(values["name"], reserved=lookup.RESERVED_NODE_NAMES)
    for key in ("instance_uuid", "chassis_uuid", "parent_node"):
        if values.get(key) is not None:
            values[key] = lookup.check_uuid(str(values[key]), key)
    if values.get("conductor_group") is not None:
        group = str(values["conductor_group"]).lower()
        if len(group) > 255 or not all(c.isalnum() or c in "._-" for c in group):
            raise bad_request(f"Invalid conductor_group {group!r}")
        values["conductor_group"] = group
    for field in ("driver_info", "instance_info"):
        document = values.get(field)
        if isinstance(document, dict) and document.get(ipxe.KERNEL_APPEND) is not None:
            try:
                ipxe.check_kernel_append(field, document[ipxe.KERNEL_APPEND])
            except DriverError as exc:
                raise bad_request(str(exc)) from None


def _duplicate(exc: IntegrityError, values: dict[str, Any]) -> RequestError:
    text = str(exc.orig).lower()
    if "name" in text and values.get("name"):
        return conflict(f"A node with name {values['name']} already exists.")
    if "instance_uuid" in text:
        return conflict(
            f"Instance {values.get('instance_uuid')} is already associated with a node."
        )
    return conflict(f"A node with UUID {values.get('uuid')} already exists.")


# -- enroll --------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def insert_node(columns: tuple[str, ...]) -> Insert:
    """``INSERT INTO nodes ... RETURNING`` ``columns`` then ``id`` (column defaults applied)."""
    table = cast(Table, Node.__table__)
    returned = [table.c[name] for name in dict.fromkeys([*columns, "id"])]
    return insert(table).returning(*returned)


def enrolment_values(svc: Services, given: dict[str, Any], version: Version) -> dict[str, Any]:
    values = {k: v for k, v in given.items() if v is not None or k in ("name",)}
    check_values(values)
    interfaces = check_driver(svc, str(values.get("driver")), values)
    check_driver_settings(svc, str(values.get("driver")), values.get("driver_info") or {})
    for key in DICT_DEFAULTS:
        values[key] = values.get(key) or {}
    values.update({f"{family}_interface": name for family, name in interfaces.items()})
    values["uuid"] = (
        lookup.check_uuid(values["uuid"]) if values.get("uuid") else str(uuidlib.uuid4())
    )
    values.setdefault("resource_class", svc.settings.conductor.default_resource_class)
    values["provision_state"] = states.ENROLL if version >= (1, 11) else states.AVAILABLE
    if values["provision_state"] == states.AVAILABLE:
        values["power_state"] = None
    values.setdefault("conductor_group", "")
    return values


def enroll(
    svc: Services,
    given: dict[str, Any],
    version: Version,
    columns: tuple[str, ...],
    actor: str | None,
) -> Row[Any]:
    """Enroll a node from the request's fields; returns ``columns`` of the new row."""
    values = enrolment_values(svc, given, version)
    try:
        with svc.db.write() as session:
            if values.get("chassis_uuid") is not None:
                chassis.claim_for_node(session, values["chassis_uuid"])
            # One Core INSERT ... RETURNING of what the view shows: the ORM's
            # flush and refresh took most of the request, inside the write lock.
            node = (
                session.connection()
                .execute(insert_node(columns), {**values, "provision_updated_at": utcnow()})
                .one()
            )
            history.record(
                session,
                node.id,
                "provisioning",
                f"node enrolled in {values['provision_state']}",
                state=values["provision_state"],
                user=actor,
            )
    except IntegrityError as exc:
        raise _duplicate(exc, values) from None
    return node


# -- update --------------------------------------------------------------------


def _check_update_allowed(session: Session, node: Node, changes: dict[str, Any]) -> None:
    if not changes:
        return
    removing_instance = set(changes) == {"instance_uuid"} and changes["instance_uuid"] is None
    if (
        node.target_provision_state is not None
        and node.provision_state not in states.UPDATE_ALLOWED_STATES
        and not (removing_instance and node.maintenance)
    ):
        raise conflict(
            f"Node {node.uuid} can not be updated while a state transition is in progress."
        )
    fencing.check_unlocked(session, node)
    new_instance = changes.get("instance_uuid")
    if new_instance is not None and node.instance_uuid not in (None, new_instance):
        raise conflict(f"Node {node.uuid} is associated with instance {node.instance_uuid}.")


def _check_chassis(session: Session, node: Node, changes: dict[str, Any], version: Version) -> None:
    """A new chassis must exist (400); removing one takes 1.25 (406 before, as Ironic)."""
    if "chassis_uuid" not in changes:
        return
    wanted = changes["chassis_uuid"]
    if wanted is None:
        if node.chassis_uuid is not None and version < (1, 25):
            raise not_acceptable("Removing chassis_uuid needs API version 1.25 or later")
    elif wanted != node.chassis_uuid:
        chassis.claim_for_node(session, wanted)


def _interfaces_for_change(
    svc: Services, node: Node, changes: dict[str, Any], reset_interfaces: bool | None
) -> None:
    """A new driver or interface: resolve the interfaces the node ends up with."""
    driver = changes.get("driver", node.driver)
    requested = {
        f: changes.get(f"{f}_interface", getattr(node, f"{f}_interface")) for f in INTERFACES
    }
    if "driver" in changes and reset_interfaces is not False:
        requested = {f: changes.get(f"{f}_interface") for f in INTERFACES}
    interfaces = check_driver(svc, driver, {f"{f}_interface": v for f, v in requested.items()})
    # A removed interface (None) takes the driver's default, as in Ironic.
    changes.update(
        {
            f"{f}_interface": n
            for f, n in interfaces.items()
            if n != getattr(node, f"{f}_interface") or f"{f}_interface" in changes
        }
    )


def _clear_stale_reasons(node: Node, changes: dict[str, Any]) -> None:
    if changes.get("maintenance") is False:
        changes.update(maintenance_reason=None, fault=None)
    for flag in ("protected", "retired"):
        # A reason outliving its flag would be stale; ironicclient documents
        # `node unset --protected` as clearing the reason too.
        if changes.get(flag) is False and getattr(node, f"{flag}_reason") is not None:
            changes[f"{flag}_reason"] = None


PROTECTABLE_STATES = frozenset({states.ACTIVE, states.RESCUE})
"""Only a node holding an instance may be protected (Ironic's rule)."""


def _check_flags(node: Node, changes: dict[str, Any]) -> None:
    """``protected`` and ``retired`` where Ironic allows them, and their reasons only with them."""
    protecting = changes.get("protected") and not node.protected
    if protecting and node.provision_state not in PROTECTABLE_STATES:
        raise conflict(
            f"Node {node.uuid} can only be made protected in provision states 'active' or "
            f"'rescue', the current state is '{node.provision_state}'"
        )
    if changes.get("retired") and not node.retired and node.provision_state == states.AVAILABLE:
        raise conflict(
            f"Node {node.uuid} can not have 'retired' set in provision state 'available', "
            f"the current state is '{node.provision_state}'"
        )
    for flag in ("protected", "retired"):
        reason = changes.get(f"{flag}_reason")
        if reason and not changes.get(flag, getattr(node, flag)):
            raise bad_request(f"The {flag}_reason field can only be set when {flag} is True")


def update(
    svc: Services,
    ident: str,
    version: Version,
    ops: Sequence[Operation],
    render: Callable[[Node, dict[str, Any]], R],
    *,
    caller: Caller,
    reset_interfaces: bool | None,
    actor: str | None,
) -> R:
    """Apply the JSON patch ``ops`` to the node under its row lock, fenced; ``render`` the
    node as written (with the step keys its ``driver_internal_info`` shows:
    ``lookup.step_keys``).

    The patch is checked against ``node_patch.PATCH`` before the node is read;
    the caller's rules for the fields it touches are asked on the node as read.
    Two PATCHes of one node apply one after the other, each to what the
    other wrote; a conductor taking the node meanwhile makes this one a 409.
    """
    node_patch.PATCH.check(ops, version)
    patches_driver = any(op.path == "/driver" for op in ops)
    with svc.db.write() as session:
        node = lookup.find_node(session, ident, version, for_update=True)
        changes = node_patch.changes(node, ops, caller)
        _check_update_allowed(session, node, changes)
        check_values(changes)
        _check_chassis(session, node, changes, version)
        _check_flags(node, changes)
        if "instance_uuid" in changes and node.allocation_id is not None:
            allocations.release_for_patch(session, node, changes)
        if (set(changes) & INTERFACE_FIELDS) or "driver" in changes:
            _interfaces_for_change(svc, node, changes, reset_interfaces)
        if "driver" in changes or "driver_info" in changes:
            driver = changes.get("driver", node.driver)
            check_driver_settings(svc, driver, changes.get("driver_info", node.driver_info))
        elif reset_interfaces and not patches_driver:
            # What counts is a /driver operation in the patch, even one that keeps the
            # same driver (`baremetal node set --driver <same> --reset-interfaces`).
            raise bad_request(
                "The reset_interfaces parameter can only be used when changing the driver."
            )
        _clear_stale_reasons(node, changes)
        if changes:
            _write(session, node, changes, actor)
        session.refresh(node)
        shown = lookup.step_keys(session.connection(), [node.id])
        return render(node, shown.get(node.id, {}))


def _write(session: Session, node: Node, changes: dict[str, Any], actor: str | None) -> None:
    try:
        fencing.update_node(session, node, changes)
        session.flush()
    except IntegrityError as exc:
        raise _duplicate(exc, {**changes, "uuid": node.uuid}) from None
    fencing.record(session, node, "update", f"updated {', '.join(sorted(changes))}", actor)


# -- delete --------------------------------------------------------------------


def delete_node(svc: Services, ident: str, version: Version) -> None:
    """Delete the node with its ports, traits, volume records and allocation, where allowed."""
    with svc.db.write() as session:
        node = lookup.find_node(session, ident, version)
        fencing.check_unlocked(session, node)
        refuse_if_protected(node)
        if node.instance_uuid and not node.maintenance:
            raise conflict(f"Node {node.uuid} is associated with instance {node.instance_uuid}.")
        allowed = set(states.DELETE_ALLOWED_STATES)
        if not svc.settings.api.allow_delete_available:
            allowed.discard(states.AVAILABLE)
        if node.provision_state not in allowed and not node.maintenance:
            raise conflict(
                f"Can not delete node {node.uuid} while it is in provision state "
                f'"{node.provision_state}". Valid provision states to start deletion are: '
                f"{', '.join(sorted(allowed))}, or set the node into maintenance mode"
            )
        if node.allocation_id is not None:
            allocation_work.delete_allocation(session, node.allocation_id)
        session.execute(delete(Port).where(Port.node_id == node.id))
        session.execute(delete(Portgroup).where(Portgroup.node_id == node.id))
        session.execute(delete(NodeTrait).where(NodeTrait.node_id == node.id))
        volume.delete_for_node(session, node.id)
        fencing.delete_node_row(session, node)
