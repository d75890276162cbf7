"""Ports: a node's network interfaces, created, changed and deleted by operators.

A port belongs to its node: a conductor reads the node's ports when it boots
the node from the network, and the agent's lookup finds the node by them. So
a port write follows the node's fencing rule, as Ironic takes the node's lock
for it: a node a conductor holds answers 409 (after the API's short lock
wait), and the write compares and bumps the node's epoch (both nodes', when
a port moves), so a conductor that took the node in between makes the
request give up rather than change the ports under it.

Which nodes a caller may see and use is the API's policy; the route hands
in the request's ``Caller`` and the rules here ask it at the point Ironic
does.
"""

from __future__ import annotations

import dataclasses
import re
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.db.models import Node, Port, Portgroup, utcnow
from metalforge.errors import RequestError, bad_request, conflict
from metalforge.services import fencing, lookup, vifs
from metalforge.services.caller import Caller, NodeTarget
from metalforge.services.context import Services
from metalforge.services.microversion import Version
from metalforge.services.patching import Operation, Patchable, PatchPolicy, apply
from metalforge.services.values import parse_bool

PATCH = PatchPolicy(
    {
        "address": Patchable(),
        "available_for_dynamic_portgroup": Patchable(since=(1, 111)),
        "category": Patchable(since=(1, 101)),
        "description": Patchable(since=(1, 97)),
        "extra": Patchable(),
        "is_smartnic": Patchable(since=(1, 53)),
        "local_link_connection": Patchable(since=(1, 19)),
        "name": Patchable(since=(1, 88)),
        "node_uuid": Patchable(),
        "physical_network": Patchable(since=(1, 34)),
        "portgroup_uuid": Patchable(since=(1, 24)),
        "pxe_enabled": Patchable(since=(1, 19)),
        "vendor": Patchable(since=(1, 100)),
    }
)
"""The fields a JSON patch may change (as Ironic), from the version each appeared in."""

TEXT_LIMITS = {
    "physical_network": 64,
    "name": 255,
    "description": 255,
    "vendor": 255,
    "category": 80,
}
"""The longest value of each text field, on create and after a patch (the columns' widths)."""
_FLAGS = (
    ("pxe_enabled", True),
    ("is_smartnic", False),
    ("available_for_dynamic_portgroup", True),
)
"""The boolean fields, with the value create gives them (and a patch that removes one)."""
_NODE_AND_GROUP = {"node_uuid", "portgroup_uuid"}
"""Named by UUID in a patch, stored as ids."""

CONNECTIVITY_STATES = frozenset(
    {states.ENROLL, states.INSPECTING, states.INSPECT_WAIT, states.MANAGEABLE}
)
"""Where a port may join or leave a port group (or with the node in maintenance)."""

_MAC = re.compile(r"^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$")

CREATE = "baremetal:port:create"
"""The rule a caller needs on the node a new port names."""


@dataclass(frozen=True)
class NewPort:
    """A port to create, as the client asked for it (values checked by ``create_port``)."""

    node: str
    """The node's UUID or name."""
    address: str
    uuid: str | None = None
    name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    pxe_enabled: bool = True
    local_link_connection: dict[str, Any] = field(default_factory=dict)
    physical_network: str | None = None
    is_smartnic: bool = False
    description: str | None = None
    vendor: str | None = None
    category: str | None = None
    portgroup: str | None = None
    """The port group (UUID or name) the port joins, on the same node."""
    available_for_dynamic_portgroup: bool = True


@dataclass(frozen=True)
class PortChanges:
    """Every patchable field of a port after a patch, each of the right type.

    ``node_uuid`` names the node the port is to belong to (a UUID or, from
    1.5, a name); the port moves when that is another node.
    """

    node_uuid: str
    address: str
    extra: dict[str, Any]
    local_link_connection: dict[str, Any]
    physical_network: str | None
    name: str | None
    description: str | None
    vendor: str | None
    category: str | None
    pxe_enabled: bool
    is_smartnic: bool
    available_for_dynamic_portgroup: bool
    portgroup_uuid: str | None
    """The group (UUID or name) the port is a member of after the patch, or none."""


def normalise_mac(address: str) -> str:
    """``address`` as stored: lower case, colon separated; 400 for anything but a MAC."""
    mac = address.strip().lower()
    if not _MAC.match(mac):
        raise bad_request(f"Expected a MAC address but received {address}.")
    return mac.replace("-", ":")


def find_port(session: Session, ident: str, version: Version) -> Port:
    """The port named by UUID or (from 1.88) name, with its node; 404 otherwise."""
    port = session.scalar(select(Port).where(lookup.port_where(ident, version)))
    if port is None:
        raise lookup.port_not_found(ident)
    return port


def create_port(svc: Services, new: NewPort, version: Version, *, caller: Caller) -> Port:
    """Create ``new`` on its node: 403 before 400 for a node the caller may not see.

    As Ironic, the create rule is checked on the node (on none when it is
    missing or hidden) before a missing node is reported, so that a project
    learns nothing of nodes it may not see.
    """
    if new.name is not None:
        lookup.check_name(new.name)
    address = normalise_mac(new.address)
    port_uuid = lookup.check_uuid(new.uuid) if new.uuid else str(uuidlib.uuid4())
    try:
        with svc.db.write() as session:
            node = _visible_node(session, new.node, version, caller)
            caller.require(CREATE, NodeTarget.of(node))
            if node is None:
                raise bad_request(f"Node {new.node} could not be found.")
            _fence(session, node)
            port = _new_row(new, port_uuid, address, node)
            if new.portgroup is not None:
                group = member_of(session, new.portgroup, node)
                check_membership(group, port.uuid, new.pxe_enabled, None)
                check_physical_network(session, group, None, new.physical_network)
                port.portgroup_id = group.id
            session.add(port)
            session.flush()
            session.refresh(port)
    except IntegrityError as exc:
        raise _duplicate(exc, address, new.name, port_uuid) from None
    return port


def patch_port(
    svc: Services, ident: str, version: Version, ops: Sequence[Operation], *, caller: Caller
) -> Port:
    """Apply the JSON patch ``ops`` (checked against ``PATCH`` before the port is read);
    move the port when it names another node of the same owner."""
    PATCH.check(ops, version)
    try:
        with svc.db.write() as session:
            port = find_port(session, ident, version)
            before = _document(port)
            changes = _changes(apply(before, ops), before)
            node, target = _lock_nodes(session, port, changes.node_uuid, version, caller)
            _fence(session, node, *([target] if target is not None else []))
            group_id = _membership(session, port, changes, target or node)
            _rewrite(session, port, changes, target, group_id)
    except IntegrityError:
        raise conflict("A port with that MAC address or name already exists.") from None
    return port


def delete_port(svc: Services, ident: str, version: Version) -> None:
    """Delete the port (its node unreserved and as read)."""
    with svc.db.write() as session:
        port, node = _port_and_node(session, ident, version)
        _fence(session, node)
        session.execute(delete(Port).where(Port.id == port.id))


def _visible_node(session: Session, ident: str, version: Version, caller: Caller) -> Node | None:
    """The node named in a body, or None when it is missing or the caller may not see it.

    Missing and hidden read alike, so nothing is said of a hidden node's existence.
    """
    node = lookup.find_node_or_none(session, ident, version, for_update=True)
    if node is None or not caller.sees(node.owner, node.lessee):
        return None
    return node


def _port_and_node(session: Session, ident: str, version: Version) -> tuple[Port, Node]:
    """The port and its node, the node re-read under a row lock.

    Concurrent writes to one node's ports then take turns (PostgreSQL)
    instead of failing each other's epoch comparison.
    """
    port = find_port(session, ident, version)
    return port, lookup.node_for_update(session, port.node_id)


def _lock_nodes(
    session: Session, port: Port, wanted: str, version: Version, caller: Caller
) -> tuple[Node, Node | None]:
    """The port's node and the node a patch moves it to (None: it stays), under row locks.

    Both rows are locked in id order, so two patches moving ports in opposite
    directions between the same nodes take turns instead of deadlocking. As
    on create, a missing or hidden target is a bad request, not a missing
    port; and (as Ironic, for every caller) a port only moves between nodes
    of the same owner.
    """
    target_id: int | None = None
    if wanted != port.node.uuid:
        target = lookup.find_node_or_none(session, wanted, version)
        if target is None or not caller.sees(target.owner, target.lessee):
            raise bad_request(f"Node {wanted} could not be found.")
        target_id = None if target.id == port.node_id else target.id
    ids = sorted({port.node_id, *([target_id] if target_id is not None else [])})
    rows = session.scalars(
        select(Node)
        .where(Node.id.in_(ids))
        .order_by(Node.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).all()
    by_id = {row.id: row for row in rows}
    node = by_id[port.node_id]
    moved_to = by_id.get(target_id) if target_id is not None else None
    if target_id is not None and moved_to is None:
        raise bad_request(f"Node {wanted} could not be found.")
    if moved_to is not None and moved_to.owner != node.owner:
        raise bad_request(
            f"Unable to apply the requested node_uuid '{wanted}'. Requested value was invalid."
        )
    return node, moved_to


def member_of(session: Session, ident: str, node: Node) -> Portgroup:
    """The group a port on ``node`` is to join: it must exist (400) and be the node's (400)."""
    group = session.scalar(select(Portgroup).where(lookup.portgroup_where(ident)))
    if group is None:
        raise bad_request(lookup.portgroup_not_found(ident).message)
    if group.node_id != node.id:
        raise bad_request("Port can not be added to a portgroup belonging to a different node.")
    return group


def check_membership(group: Portgroup, port_uuid: str, pxe_enabled: bool, vif: str | None) -> None:
    """A group that forbids standalone ports takes no member that boots or carries a VIF (409)."""
    if group.standalone_ports_supported:
        return
    reasons = []
    if pxe_enabled:
        reasons.append("'pxe_enabled' was set to True")
    if vif:
        reasons.append(f"VIF {vif} is attached to the port")
    if reasons:
        raise conflict(
            f"Port group {group.uuid} doesn't support standalone ports. This port {port_uuid} "
            f"cannot be a member of that port group because of: {', '.join(reasons)}"
        )


def check_physical_network(
    session: Session, group: Portgroup, port_id: int | None, physical_network: str | None
) -> None:
    """A group's ports share one physical network (the group's own when it has no other
    members yet); a port on another joins it or changes in it only as a 409."""
    others = set(
        session.scalars(
            select(Port.physical_network).where(
                Port.portgroup_id == group.id, *([Port.id != port_id] if port_id else [])
            )
        )
    )
    if not others:
        if group.physical_network is None:
            return
        others = {group.physical_network}
    if len(others) > 1:
        raise bad_request(
            f"Port group {group.uuid} has member ports with inconsistent physical networks "
            f"({', '.join(sorted(str(n) for n in others))}). All ports in a port group must "
            "have the same physical network."
        )
    (shared,) = others
    if physical_network != shared:
        raise conflict(
            f"Port with physical network {physical_network} cannot become a member of port "
            f"group {group.uuid} which has ports in physical network {shared}."
        )


def _membership(session: Session, port: Port, changes: PortChanges, node: Node) -> int | None:
    """The group the port belongs to after ``changes``, checked as Ironic checks it."""
    group = None
    if changes.portgroup_uuid is not None:
        group = member_of(session, changes.portgroup_uuid, node)
    group_id = group.id if group is not None else None
    if group_id != port.portgroup_id and (
        node.provision_state not in CONNECTIVITY_STATES and not node.maintenance
    ):
        raise conflict(
            f"Port {port.uuid} can not have any connectivity attributes (portgroup_uuid) "
            f"updated unless node {node.uuid} is in a "
            f"{', '.join(sorted(CONNECTIVITY_STATES))} state or in maintenance mode. "
            f"The current state is {node.provision_state}."
        )
    if group is not None:
        check_membership(group, port.uuid, changes.pxe_enabled, vifs.vif_of(port))
        if group_id != port.portgroup_id or changes.physical_network != port.physical_network:
            check_physical_network(session, group, port.id, changes.physical_network)
    return group_id


def _fence(session: Session, *nodes: Node) -> None:
    """Refuse held nodes, then bump each node's epoch if it is still as read."""
    for node in nodes:
        fencing.check_unlocked(session, node)
    for node in nodes:
        fencing.update_node(session, node, {})


def _rewrite(
    session: Session, port: Port, changes: PortChanges, target: Node | None, group_id: int | None
) -> None:
    """Store ``changes`` (and the node the port moves to) and read the port back to answer."""
    values = dataclasses.asdict(changes)
    del values["node_uuid"]
    del values["portgroup_uuid"]
    values["portgroup_id"] = group_id
    if target is not None:
        values["node_id"] = target.id
    session.execute(update(Port).where(Port.id == port.id).values(**values, updated_at=utcnow()))
    session.flush()
    session.refresh(port)


def _document(port: Port) -> dict[str, Any]:
    """The port's patchable fields, as a patch sees them."""
    doc = {name: getattr(port, name) for name in PATCH.fields.keys() - _NODE_AND_GROUP}
    doc["node_uuid"] = port.node.uuid
    doc["portgroup_uuid"] = port.portgroup.uuid if port.portgroup is not None else None
    return doc


def _changes(after: dict[str, Any], before: dict[str, Any]) -> PortChanges:
    """The patched document's values, each checked for its type.

    The checks run in the order they always have, so a patch with several
    faults is answered with the same first one.
    """
    extra, connection = (_object(after, n) for n in ("extra", "local_link_connection"))
    address = normalise_mac(str(after.get("address") or ""))
    network, name, description, vendor, category = (_text(after, n) for n in TEXT_LIMITS)
    if name is not None:
        lookup.check_name(name)
    pxe_enabled, is_smartnic, dynamic = (_flag(after, *f) for f in _FLAGS)
    return PortChanges(
        node_uuid=_node_uuid(after, before),
        address=address,
        extra=extra,
        local_link_connection=connection,
        physical_network=network,
        name=name,
        description=description,
        vendor=vendor,
        category=category,
        pxe_enabled=pxe_enabled,
        is_smartnic=is_smartnic,
        available_for_dynamic_portgroup=dynamic,
        portgroup_uuid=_portgroup(after),
    )


def _object(after: dict[str, Any], name: str) -> dict[str, Any]:
    """A JSON-object field after the patch (a removed one is empty, as on create)."""
    value = after.get(name) or {}
    if not isinstance(value, dict):
        raise bad_request(f"Invalid value for {name}: must be a JSON object")
    return value


def _text(after: dict[str, Any], name: str) -> str | None:
    """A string field after the patch, held to create's length limit (and the column's)."""
    value = after.get(name)
    if value is not None and not isinstance(value, str):
        raise bad_request(f"Invalid value for {name}: must be a string")
    if value is not None and len(value) > TEXT_LIMITS[name]:
        raise bad_request(
            f"Invalid value for {name}: at most {TEXT_LIMITS[name]} characters are allowed"
        )
    return value


def _flag(after: dict[str, Any], name: str, default: bool) -> bool:
    """A boolean field after the patch; a removed one takes create's default."""
    value = after.get(name, default)
    if isinstance(value, str):
        # ironicclient sends "True"/"False" (`port set --pxe-enabled`).
        value = parse_bool(name, value)
    if value is None:
        value = default
    if not isinstance(value, bool):
        raise bad_request(f"Invalid value for {name}: must be a boolean")
    return value


def _node_uuid(after: dict[str, Any], before: dict[str, Any]) -> str:
    """The node the port is to belong to; ``_lock_nodes`` checks that it exists and may
    be used. As on create, a port must belong to a node, so removing it is a bad
    request, not a missing port."""
    value = after.get("node_uuid")
    if value != before["node_uuid"] and not isinstance(value, str):
        raise bad_request("Invalid value for node_uuid: a port needs a node")
    return str(value)


def _portgroup(after: dict[str, Any]) -> str | None:
    value = after.get("portgroup_uuid")
    if value is not None and not isinstance(value, str):
        raise bad_request("Invalid value for portgroup_uuid: must be a string")
    return value


def _new_row(new: NewPort, port_uuid: str, address: str, node: Node) -> Port:
    return Port(
        uuid=port_uuid,
        address=address,
        node_id=node.id,
        name=new.name,
        extra=new.extra,
        pxe_enabled=new.pxe_enabled,
        local_link_connection=new.local_link_connection,
        physical_network=new.physical_network,
        is_smartnic=new.is_smartnic,
        description=new.description,
        vendor=new.vendor,
        category=new.category,
        available_for_dynamic_portgroup=new.available_for_dynamic_portgroup,
        internal_info={},
    )


def _duplicate(exc: IntegrityError, address: str, name: str | None, port_uuid: str) -> RequestError:
    """The 409 for a create that broke a uniqueness rule, naming the value that did."""
    text = str(exc.orig).lower()
    if "address" in text:
        return conflict(f"A port with MAC address {address} already exists.")
    if "name" in text:
        return conflict(f"A port with name {name} already exists.")
    return conflict(f"A port with UUID {port_uuid} already exists.")
