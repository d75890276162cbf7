"""The ramdisk agent's calls: finding its node (and its token once), heartbeats.

The session lives in ``agent_sessions``, not on the node row, so a lookup or
heartbeat never waits for the node's reservation. Lookup answers only for
nodes whose flow may have booted the agent (the flow specs say which states)
and on which metalforge booted a ramdisk (Ironic's ``restrict_lookup``); a
heartbeat in a state whose flow waits for the agent queues a check.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from metalforge.conductor import node_work
from metalforge.conductor.flows import catalog
from metalforge.conductor.work import NoPayload
from metalforge.db import agent_sessions
from metalforge.db.models import Node
from metalforge.errors import bad_request, not_found
from metalforge.services import lookup
from metalforge.services.context import Services
from metalforge.services.microversion import Version

Heartbeat = agent_sessions.Heartbeat


@dataclass(frozen=True)
class Found:
    """The node an agent looked up, and its one-time token (``None``: already handed out)."""

    node: Node
    token: str | None


def _not_found() -> Exception:
    return not_found("Node could not be found.")


def _candidate(session: Session, version: Version, macs: list[str], node_uuid: str | None) -> Node:
    """The node a lookup names, if it may look up now (404 otherwise)."""
    if node_uuid:
        node = lookup.load_node(session, lookup.check_uuid(node_uuid, "node_uuid"), version)
    else:
        found = lookup.node_by_macs(session, macs)
        if found is None:
            raise _not_found()
        node = found
    if node.provision_state not in catalog.LOOKUP_STATES and not agent_sessions.is_kept(
        session, node.id
    ):
        # Out of a flow, only an agent a flow left running (fast track) looks up.
        raise _not_found()
    return node


def look_up(
    svc: Services, version: Version, macs: list[str], node_uuid: str | None, *, hand_token: bool
) -> Found:
    """The node the agent runs on, by UUID or by its MACs; 404 for any node not booting one.

    ``hand_token``: the client can receive the token (API 1.62); otherwise it
    is left for the agent that can.
    """
    # A read first: whatever sends lookups of unknown MACs (anything on the provisioning
    # network may) costs no write transaction, which on SQLite would queue every writer.
    with svc.db.read() as session:
        _candidate(session, version, macs, node_uuid)
    with svc.db.write() as session:
        node = _candidate(session, version, macs, node_uuid)
        token: str | None = None
        try:
            if hand_token:
                token = agent_sessions.issue_token(session, node.id)
            else:
                agent_sessions.check_booted(session, node.id)
        except agent_sessions.NoRamdiskBooted:
            # metalforge did not boot a ramdisk on this node: no agent belongs to it.
            raise _not_found() from None
    return Found(node, token)


def heartbeat(
    svc: Services, ident: str, version: Version, token: str, beat: agent_sessions.Heartbeat
) -> None:
    """Record the agent's heartbeat; wake the node's flow if it waits for the agent."""
    columns = ("id", "uuid", "provision_state", "driver", "conductor_group")
    with svc.db.write() as session:
        row = lookup.find_node_row(session, ident, version, columns)
        try:
            agent_sessions.record_heartbeat(session, row.id, token, beat)
        except agent_sessions.HeartbeatRefused as exc:
            raise bad_request(str(exc)) from None
        woke = row.provision_state in catalog.AGENT_WAKE_STATES
        if woke:
            svc.queue_for(session, row, node_work.PROVISION, NoPayload())
    if woke:
        svc.notify()
