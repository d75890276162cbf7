"""Port groups: a node's ports bonded together, created, changed and deleted by operators.

A port group belongs to one node, as its ports do, and a write to it follows
the node's fencing rule (``services.fencing``): a held node answers 409
after the API's short lock wait, and the write compares and bumps the
node's epoch. The rules are Ironic's:

* a group's address (the bond's MAC) and name are unique among groups;
* a group moves to another node only while that node's connectivity may
  change (``enroll``, ``inspecting``, ``inspect wait``, ``manageable`` or
  maintenance) and only while it has no member ports;
* ``standalone_ports_supported=false`` (the bond's ports cannot boot or
  carry a network alone) is refused while a member port boots from the
  network (``pxe_enabled``) or carries a VIF;
* a group with member ports is not deleted.

Which nodes a caller may see and use is the API's policy, asked of the
request's ``Caller``.
"""

from __future__ import annotations

import copy
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.db.models import Node, Port, Portgroup, utcnow
from metalforge.errors import RequestError, bad_request, conflict
from metalforge.services import fencing, lookup, vifs
from metalforge.services.bodies import PortgroupCreate, checked
from metalforge.services.caller import Caller, NodeTarget
from metalforge.services.context import Services
from metalforge.services.microversion import Version
from metalforge.services.patching import Operation, Patchable, PatchPolicy, apply
from metalforge.services.ports import normalise_mac
from metalforge.services.values import parse_bool

CONNECTIVITY_STATES = frozenset(
    {states.ENROLL, states.INSPECTING, states.INSPECT_WAIT, states.MANAGEABLE}
)
"""Where a node's ports and groups may change how it connects (or in maintenance)."""

CREATE = "baremetal:portgroup:create"
"""The rule a caller needs on the node a new group names."""

SINCE: Version = (1, 23)
"""The microversion port groups appeared in."""
PATCH = PatchPolicy(
    {
        "address": Patchable(since=SINCE),
        "extra": Patchable(since=SINCE),
        "mode": Patchable(since=(1, 26)),
        "name": Patchable(since=SINCE),
        "node_uuid": Patchable(since=SINCE),
        "properties": Patchable(since=(1, 26)),
        "standalone_ports_supported": Patchable(since=SINCE),
        "physical_network": Patchable(since=(1, 102)),
        "category": Patchable(since=(1, 103)),
    }
)
"""What a JSON patch may change (Ironic's list, in its order), from the version each
field appeared in."""


@dataclass(frozen=True)
class PortgroupSpec:
    """What a port group should be: a create's body, or a stored group after a patch.

    ``node`` names the node (a UUID, or a name from 1.5); ``mode`` None
    takes the configured default on create.
    """

    node: str
    address: str | None = None
    name: str | None = None
    mode: str | None = None
    standalone_ports_supported: bool = True
    properties: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    physical_network: str | None = None
    category: str | None = None
    uuid: str | None = None


def standalone_flag(value: Any) -> bool:
    """``standalone_ports_supported``: a boolean, or the strings clients send for one."""
    if value is None:
        return True
    if isinstance(value, str):
        return parse_bool("standalone_ports_supported", value)
    if not isinstance(value, bool):
        raise bad_request("Invalid value for standalone_ports_supported: must be a boolean")
    return value


def spec_from(body: PortgroupCreate, uuid: str | None) -> PortgroupSpec:
    """A parsed body (a create's, or a patched group's) as the service takes it."""
    return PortgroupSpec(
        node=body.node_uuid,
        address=body.address,
        name=body.name,
        mode=body.mode,
        standalone_ports_supported=standalone_flag(body.standalone_ports_supported),
        properties=body.properties or {},
        extra=body.extra or {},
        physical_network=body.physical_network,
        category=body.category,
        uuid=uuid,
    )


@lookup.json_suffix_fallback
def find_portgroup(session: Session, ident: str) -> Portgroup:
    group = session.scalar(select(Portgroup).where(lookup.portgroup_where(ident)))
    if group is None:
        raise lookup.portgroup_not_found(ident)
    return group


def spec_of(group: Portgroup) -> PortgroupSpec:
    """``group`` as stored (a deep copy: what a patch changes is not the loaded row)."""
    return copy.deepcopy(
        PortgroupSpec(
            node=group.node.uuid,
            address=group.address,
            name=group.name,
            mode=group.mode,
            standalone_ports_supported=group.standalone_ports_supported,
            properties=group.properties,
            extra=group.extra,
            physical_network=group.physical_network,
            category=group.category,
            uuid=group.uuid,
        )
    )


def _checked(spec: PortgroupSpec) -> PortgroupSpec:
    if spec.name is not None:
        lookup.check_name(spec.name)
    address = normalise_mac(spec.address) if spec.address else None
    return replace(spec, address=address)


def _node_for(session: Session, ident: str, version: Version, caller: Caller) -> Node | None:
    """The node named in a body under its row lock, or None if missing or hidden."""
    node = lookup.find_node_or_none(session, ident, version, for_update=True)
    if node is None or not caller.sees(node.owner, node.lessee):
        return None
    return node


def create_portgroup(
    svc: Services, spec: PortgroupSpec, version: Version, *, caller: Caller
) -> Portgroup:
    """Create the group on its node: 403 before 400 for a node the caller may not see."""
    spec = _checked(spec)
    group_uuid = lookup.check_uuid(spec.uuid) if spec.uuid else str(uuidlib.uuid4())
    try:
        with svc.db.write() as session:
            node = _node_for(session, spec.node, version, caller)
            caller.require(CREATE, NodeTarget.of(node))
            if node is None:
                raise bad_request(f"Node {spec.node} could not be found.")
            fencing.check_unlocked(session, node)
            fencing.update_node(session, node, {})
            group = Portgroup(
                uuid=group_uuid,
                node_id=node.id,
                address=spec.address,
                name=spec.name,
                mode=spec.mode or svc.settings.conductor.default_portgroup_mode,
                standalone_ports_supported=spec.standalone_ports_supported,
                properties=spec.properties,
                extra=spec.extra,
                internal_info={},
                physical_network=spec.physical_network,
                category=spec.category,
            )
            session.add(group)
            session.flush()
            session.refresh(group)
    except IntegrityError as exc:
        raise _duplicate(exc, spec, group_uuid) from None
    return group


def patch_portgroup(
    svc: Services, ident: str, version: Version, ops: Sequence[Operation], *, caller: Caller
) -> Portgroup:
    """Apply the JSON patch ``ops`` (checked against ``PATCH`` before the group is read)
    under the node's row lock (both nodes', when the group moves), each value checked
    as on create."""
    PATCH.check(ops, version)
    try:
        with svc.db.write() as session:
            group = find_portgroup(session, ident)
            after = _checked(_patched(spec_of(group), ops))
            node, target = _lock_nodes(session, group, after.node, version, caller)
            if target is not None:
                _check_move(session, group, target)
            _check_standalone(session, group, after)
            for held in (node, *([target] if target is not None else [])):
                fencing.check_unlocked(session, held)
                fencing.update_node(session, held, {})
            session.execute(
                update(Portgroup)
                .where(Portgroup.id == group.id)
                .values(
                    node_id=(target or node).id,
                    address=after.address,
                    name=after.name,
                    mode=after.mode or svc.settings.conductor.default_portgroup_mode,
                    standalone_ports_supported=after.standalone_ports_supported,
                    properties=after.properties,
                    extra=after.extra,
                    physical_network=after.physical_network,
                    category=after.category,
                    updated_at=utcnow(),
                )
            )
            session.flush()
            session.refresh(group)
    except IntegrityError as exc:
        raise _duplicate(exc, spec_of(group), group.uuid) from None
    return group


def _patched(before: PortgroupSpec, ops: Sequence[Operation]) -> PortgroupSpec:
    """``before`` with ``ops`` applied, parsed as a create's body would be: a group keeps
    a mode, and a removed ``properties`` or ``extra`` is empty."""
    document = {
        "node_uuid": before.node,
        "address": before.address,
        "name": before.name,
        "mode": before.mode,
        "standalone_ports_supported": before.standalone_ports_supported,
        "properties": before.properties,
        "extra": before.extra,
        "physical_network": before.physical_network,
        "category": before.category,
    }
    after = apply(document, ops)
    if after.get("mode") is None:
        raise bad_request("'mode' is a mandatory attribute and can not be removed")
    for name in ("properties", "extra"):
        if after.get(name) is None:
            after[name] = {}
    return spec_from(checked(PortgroupCreate, after, "portgroup"), before.uuid)


def delete_portgroup(svc: Services, ident: str) -> None:
    """Delete an empty group (400 while ports are its members), its node fenced."""
    with svc.db.write() as session:
        group = find_portgroup(session, ident)
        node = _locked_node(session, group.node_id)
        fencing.check_unlocked(session, node)
        if session.scalar(select(exists().where(Port.portgroup_id == group.id))):
            raise bad_request(
                f"Cannot complete the requested action because portgroup {group.uuid} "
                "contains ports."
            )
        fencing.update_node(session, node, {})
        session.delete(group)


_locked_node = lookup.node_for_update


def _lock_nodes(
    session: Session, group: Portgroup, wanted: str, version: Version, caller: Caller
) -> tuple[Node, Node | None]:
    """The group's node and the node a patch moves it to (None: it stays), locked in id order."""
    target_id: int | None = None
    if wanted != group.node.uuid:
        target = lookup.find_node_or_none(session, wanted, version)
        if target is None or not caller.sees(target.owner, target.lessee):
            raise bad_request(f"Node {wanted} could not be found.")
        target_id = None if target.id == group.node_id else target.id
    ids = sorted({group.node_id, *([target_id] if target_id is not None else [])})
    rows = {n.id: n for n in (_locked_node(session, i) for i in ids)}
    return rows[group.node_id], (rows[target_id] if target_id is not None else None)


def _check_move(session: Session, group: Portgroup, target: Node) -> None:
    if target.provision_state not in CONNECTIVITY_STATES and not target.maintenance:
        raise conflict(
            f"Portgroup {group.uuid} can not be associated to node {target.uuid} unless the "
            f"node is in a {', '.join(sorted(CONNECTIVITY_STATES))} state or in maintenance "
            f"mode. Current state is '{target.provision_state}'."
        )
    if session.scalar(select(exists().where(Port.portgroup_id == group.id))):
        raise bad_request(
            f"Portgroup {group.uuid} can not be associated with node {target.uuid} because "
            "there are ports associated with this portgroup."
        )


def _check_standalone(session: Session, group: Portgroup, after: PortgroupSpec) -> None:
    """Refuse ``standalone_ports_supported=false`` over a member that boots or carries a VIF."""
    if after.standalone_ports_supported or not group.standalone_ports_supported:
        return
    for port in session.scalars(select(Port).where(Port.portgroup_id == group.id)):
        reasons = []
        if port.pxe_enabled:
            reasons.append("'pxe_enabled' is set to True")
        if (vif := vifs.vif_of(port)) is not None:
            reasons.append(f"VIF {vif} is attached to this port")
        if reasons:
            raise conflict(
                "standalone_ports_supported can not be set to False, because the port group "
                f"{group.uuid} contains port with {', '.join(reasons)}"
            )


def _duplicate(exc: IntegrityError, spec: PortgroupSpec, group_uuid: str) -> RequestError:
    text = str(exc.orig).lower()
    if "address" in text:
        return conflict(f"A port group with MAC address {spec.address} already exists.")
    if "name" in text:
        return conflict(f"A portgroup with name {spec.name} already exists.")
    return conflict(f"A portgroup with UUID {group_uuid} already exists.")
