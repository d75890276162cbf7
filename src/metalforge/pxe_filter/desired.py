"""What a PXE filter host should let through, computed from the database.

The nodes being inspected (introspection ``starting`` or ``waiting``: they
boot, or run, the inspection ramdisk) are allowed, and so are the nodes a
conductor is booting the agent's ramdisk on for another flow (cleaning,
deploying, servicing, rescuing: a ramdisk session began and the node is in a
state whose agent may look up), which boot it from the network and need an
address while it runs, and the rescued nodes, whose rescue system is that
ramdisk. Every other MAC the service knows is denied, so a node
rebooting into its tenant's system never boots a ramdisk; a MAC nobody knows
is allowed only when discovery is on, since then an unknown machine booting
is how it enrols. Only the elected leader's host answers at all: every other
host gets the fully blocking state.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from metalforge import inspection_states as ins
from metalforge import states
from metalforge.conductor.flows import catalog
from metalforge.db.models import AgentSession, Introspection, Node, Port
from metalforge.macs import is_stored_mac


@dataclass(frozen=True)
class FilterState:
    """One host's filter: allowed MACs, denied MACs, and what happens to any other."""

    allowed: frozenset[str]
    denied: frozenset[str]
    unknown_allowed: bool

    @property
    def blocking(self) -> bool:
        """Whether this host answers nobody."""
        return not self.allowed and not self.unknown_allowed


BLOCK_ALL = FilterState(frozenset(), frozenset(), unknown_allowed=False)
"""Answer nobody: what a host applies before it knows better, on error and at exit."""


def desired_state(session: Session, *, discovery: bool) -> FilterState:
    """The cluster's filter, from every port and its node's introspection record."""
    rows = session.execute(
        select(Port.address, Introspection.state)
        .join(Node, Port.node_id == Node.id)
        .outerjoin(Introspection, Introspection.node_uuid == Node.uuid)
    )
    allowed: set[str] = set()
    denied: set[str] = set()
    for address, state in rows:
        mac = address.lower()
        if not is_stored_mac(mac):
            continue  # the API stores only MACs; anything else is nothing a driver may write
        (allowed if state in ins.BOOTING_RAMDISK else denied).add(mac)
    booting = session.scalars(
        select(Port.address)
        .join(Node, Port.node_id == Node.id)
        .join(AgentSession, AgentSession.node_id == Node.id)
        .where(
            AgentSession.booted_at.is_not(None),
            or_(
                Node.provision_state.in_(sorted(catalog.LOOKUP_STATES)),
                # A flow left the agent running for the next (fast track): its
                # lease must go on being renewed between flows.
                AgentSession.kept_since.is_not(None),
            ),
        )
    )
    # A rescued node runs the ramdisk as its tenant's rescue system, with the address
    # the provisioning network gave it: its lease must go on being renewed.
    rescued = session.scalars(
        select(Port.address)
        .join(Node, Port.node_id == Node.id)
        .where(Node.provision_state == states.RESCUE)
    )
    for address in (*booting, *rescued):
        mac = address.lower()
        if is_stored_mac(mac):
            allowed.add(mac)
            denied.discard(mac)
    return FilterState(frozenset(allowed), frozenset(denied), unknown_allowed=discovery)


def for_host(state: FilterState, *, leading: bool) -> FilterState:
    """What one host applies: the leader the cluster's filter, any other host blocking
    (its known MACs stay denied, so taking over needs only the allowed ones)."""
    if leading:
        return state
    return FilterState(frozenset(), state.allowed | state.denied, unknown_allowed=False)
