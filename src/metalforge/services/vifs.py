"""VIFs: which of a node's ports or port groups carries a tenant's network.

Where a VIF (a tenant network port's id) is recorded on a port or a port group,
and the attaching and detaching of ``/v1/nodes/{node}/vifs``. Only a node
whose network interface records VIFs (``flat``) records them; on ``noop``
attaching and detaching are accepted and do nothing and none is listed, as
in Ironic (``drivers.network``).

Ironic records an attached VIF in the port-like object's
``internal_info["tenant_vif_port_id"]``; older clients wrote
``extra["vif_port_id"]``, which Ironic still reads. Rules that depend on a
port carrying a VIF (a bond that forbids standalone ports) ask here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from metalforge.db.models import Node, Port, Portgroup, utcnow
from metalforge.drivers.hardware import UnknownDriver
from metalforge.drivers.network import NetworkInterface
from metalforge.errors import bad_request, conflict
from metalforge.services import fencing, lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version

TENANT_VIF_KEY = "tenant_vif_port_id"
LEGACY_VIF_KEY = "vif_port_id"


class PortLike(Protocol):
    """A port or a port group: both record a VIF the same way."""

    @property
    def internal_info(self) -> dict[str, Any]: ...

    @property
    def extra(self) -> dict[str, Any]: ...


def vif_of(port: PortLike) -> str | None:
    """The VIF attached to ``port``, if any."""
    vif = (port.internal_info or {}).get(TENANT_VIF_KEY) or (port.extra or {}).get(LEGACY_VIF_KEY)
    return str(vif) if vif else None


# -- attaching and detaching -------------------------------------------------------


@dataclass(frozen=True)
class VifRequest:
    """A VIF to attach: its id, and (from 1.67) the port or port group it must go to."""

    vif_id: str
    port_uuid: str | None = None
    portgroup_uuid: str | None = None


def _records_vifs(svc: Services, node: Node) -> bool:
    """Whether the node's network interface records VIFs (``flat``; ``noop`` does not)."""
    try:
        network = svc.drivers.optional_interface_of(node, NetworkInterface)
    except UnknownDriver as exc:
        raise bad_request(str(exc)) from None
    return network is not None and network.records_vifs


def list_vifs(svc: Services, node_ident: str, version: Version) -> list[str]:
    """The VIFs attached to the node's ports and port groups (ports first, as Ironic lists)."""
    with svc.db.read() as session:
        node = lookup.find_node(session, node_ident, version)
        if not _records_vifs(svc, node):
            return []
        holders: list[Port | Portgroup] = [*_ports(session, node), *_groups(session, node)]
        return [vif for vif in (vif_of(h) for h in holders) if vif is not None]


def attach_vif(svc: Services, node_ident: str, version: Version, request: VifRequest) -> None:
    """Record the VIF on a free port or port group of the node, fenced like a port write
    (nothing on a network interface that records none).

    Without Networking, attaching is bookkeeping: which of the node's network
    ports carries the tenant's network. The choice is Ironic's: a port group
    before a port, a port that boots from the network before one that does
    not; a port in a group counts only once another VIF holds one of the
    group's ports. 409 when the VIF is already attached, 400 when nothing is free.
    """
    with svc.db.write() as session:
        node = lookup.find_node(session, node_ident, version, for_update=True)
        fencing.check_unlocked(session, node)
        if not _records_vifs(svc, node):
            return
        ports, groups = _ports(session, node), _groups(session, node)
        everything: list[Port | Portgroup] = [*ports, *groups]
        for holder in everything:
            if vif_of(holder) == request.vif_id:
                kind = "Port" if isinstance(holder, Port) else "Portgroup"
                raise conflict(
                    f"Unable to attach VIF because VIF {request.vif_id} is already attached to "
                    f"Ironic {kind} {holder.uuid}"
                )
        chosen = _free_holder(ports, groups, request)
        if chosen is None:
            raise bad_request(
                f"Unable to attach VIF {request.vif_id}, not enough free physical ports."
            )
        fencing.update_node(session, node, {})
        info = {**(chosen.internal_info or {}), TENANT_VIF_KEY: request.vif_id}
        model = Port if isinstance(chosen, Port) else Portgroup
        session.execute(
            update(model)
            .where(model.id == chosen.id)
            .values(internal_info=info, updated_at=utcnow())
        )


def detach_vif(svc: Services, node_ident: str, version: Version, vif_id: str) -> None:
    """Forget the VIF on whichever of the node's ports or groups holds it; 400 if none does
    (on ``noop``, 204: a VIF an older release recorded there is forgotten too, as it would
    otherwise hold its port back from a port group for good)."""
    with svc.db.write() as session:
        node = lookup.find_node(session, node_ident, version, for_update=True)
        fencing.check_unlocked(session, node)
        holders: list[Port | Portgroup] = [*_ports(session, node), *_groups(session, node)]
        found = next((h for h in holders if vif_of(h) == vif_id), None)
        if found is None:
            if not _records_vifs(svc, node):
                return  # noop: accepted, nothing to do
            raise bad_request(
                f"Unable to detach VIF {vif_id} from node {node.uuid} because it is not "
                "attached to it."
            )
        fencing.update_node(session, node, {})
        info = {k: v for k, v in (found.internal_info or {}).items() if k != TENANT_VIF_KEY}
        extra = {k: v for k, v in (found.extra or {}).items() if k != LEGACY_VIF_KEY}
        model = Port if isinstance(found, Port) else Portgroup
        session.execute(
            update(model)
            .where(model.id == found.id)
            .values(internal_info=info, extra=extra, updated_at=utcnow())
        )


def _ports(session: Session, node: Node) -> list[Port]:
    return list(session.scalars(select(Port).where(Port.node_id == node.id).order_by(Port.id)))


def _groups(session: Session, node: Node) -> list[Portgroup]:
    return list(
        session.scalars(
            select(Portgroup).where(Portgroup.node_id == node.id).order_by(Portgroup.id)
        )
    )


@dataclass
class _PortScan:
    """The node's ports (those the request allows) sorted by what they leave free."""

    free: list[Port] = field(default_factory=list)
    """Ports in no group, without a VIF: each may take one."""
    members: dict[int, list[Port]] = field(default_factory=dict)
    """Free ports by group id: taken one at a time once the group is busy."""
    busy_groups: set[int] = field(default_factory=set)
    """Groups one of whose ports already holds a VIF."""


def _scan_ports(ports: list[Port], request: VifRequest) -> _PortScan:
    """Sort the ports once, so the group pass can ask which groups are free or busy."""
    scan = _PortScan()
    for port in ports:
        if request.port_uuid is not None and port.uuid != request.port_uuid:
            continue
        if vif_of(port) is not None:
            if port.portgroup_id is not None:
                scan.busy_groups.add(port.portgroup_id)
            continue
        if port.portgroup_id is None and request.portgroup_uuid is None:
            scan.free.append(port)
        elif port.portgroup_id is not None:
            scan.members.setdefault(port.portgroup_id, []).append(port)
    return scan


def _group_candidates(
    groups: list[Portgroup], scan: _PortScan, request: VifRequest
) -> list[Port | Portgroup]:
    """What the node's groups offer: a free group itself, or a busy group's free ports."""
    candidates: list[Port | Portgroup] = []
    for group in groups:
        if request.portgroup_uuid is not None and group.uuid != request.portgroup_uuid:
            continue
        if vif_of(group) is not None:
            continue
        if group.id in scan.busy_groups:
            if request.portgroup_uuid is None:
                candidates.extend(scan.members.get(group.id, []))
        elif scan.members.get(group.id):
            candidates.append(group)
    return candidates


def _preference(holder: Port | Portgroup) -> tuple[bool, bool]:
    """A group before a port, a port that boots from the network before one that does not."""
    if isinstance(holder, Portgroup):
        return (True, True)
    return (False, bool(holder.pxe_enabled))


def _free_holder(
    ports: list[Port], groups: list[Portgroup], request: VifRequest
) -> Port | Portgroup | None:
    """Ironic's choice of where a VIF goes, among what is free (see ``attach_vif``)."""
    scan = _scan_ports(ports, request)
    candidates: list[Port | Portgroup] = list(scan.free)
    if request.port_uuid is None:
        candidates.extend(_group_candidates(groups, scan, request))
    if not candidates:
        return None
    return max(candidates, key=_preference)
