"""Nodes, ports and introspection records written straight to the database."""

from __future__ import annotations

import uuid as uuidlib

from sqlalchemy import select, update

from metalforge.db import agent_sessions
from metalforge.db.engine import Database
from metalforge.db.models import Introspection, Node, Port


def add_node(db: Database, *macs: str, inspection: str | None = None) -> str:
    """A node with ports ``macs`` and, with ``inspection``, a record in that state."""
    uuid = str(uuidlib.uuid4())
    with db.write() as session:
        node = Node(uuid=uuid, driver="fake-hardware", provision_state="manageable")
        session.add(node)
        session.flush()
        session.add_all(Port(uuid=str(uuidlib.uuid4()), address=m, node_id=node.id) for m in macs)
        if inspection is not None:
            session.add(Introspection(node_uuid=uuid, state=inspection, generation=1))
    return uuid


def set_inspection(db: Database, uuid: str, state: str) -> None:
    with db.write() as session:
        record = session.get(Introspection, uuid)
        if record is None:
            session.add(Introspection(node_uuid=uuid, state=state, generation=1))
        else:
            record.state = state


def mac(index: int) -> str:
    """The ``index``-th test MAC (locally administered)."""
    return "02:00:" + ":".join(f"{(index >> shift) & 0xFF:02x}" for shift in (24, 16, 8, 0))


def boot_ramdisk(db: Database, uuid: str, state: str) -> None:
    """Put the node in ``state`` with a ramdisk boot begun, as a conductor does."""
    with db.write() as session:
        node_id = session.scalar(select(Node.id).where(Node.uuid == uuid))
        assert node_id is not None
        session.execute(update(Node).where(Node.id == node_id).values(provision_state=state))
        agent_sessions.begin(session, node_id)


def end_ramdisk(db: Database, uuid: str, state: str) -> None:
    """The ramdisk's boot ended (powered off) and the node moved to ``state``."""
    with db.write() as session:
        node_id = session.scalar(select(Node.id).where(Node.uuid == uuid))
        assert node_id is not None
        agent_sessions.end(session, node_id)
        session.execute(update(Node).where(Node.id == node_id).values(provision_state=state))
