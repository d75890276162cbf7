"""Schema upgrades keep the data: a table rebuilt on SQLite loses none of its neighbours' rows."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError

from metalforge.db.engine import Database
from metalforge.db.models import Allocation, Node, NodeHistory, NodeTrait, Port, utcnow


def _node(uuid_tail: str) -> Node:
    return Node(
        uuid=f"00000000-0000-0000-0000-{uuid_tail:0>12}",
        driver="fake-hardware",
        provision_state="active",
        epoch=0,
    )


def test_the_allocation_foreign_keys_keep_data_and_clear_dangling_references(
    db_url: str,
) -> None:
    db = Database(db_url)
    db.upgrade("0005")
    with db.write() as session:
        held, dangling = _node("1"), _node("2")
        session.add_all([held, dangling])
        session.flush()
        allocation = Allocation(
            uuid="10000000-0000-0000-0000-000000000001",
            node_id=held.id,
            resource_class="baremetal",
            state="active",
            created_at=utcnow(),
        )
        session.add(allocation)
        session.flush()
        held.allocation_id = allocation.id
        dangling.allocation_id = allocation.id + 100  # nothing enforced this before
        session.add(
            Port(
                uuid="20000000-0000-0000-0000-000000000001",
                address="52:54:00:00:00:01",
                node_id=held.id,
            )
        )
        session.add(NodeTrait(node_id=held.id, trait="CUSTOM_KEEP"))
        session.add(
            NodeHistory(
                uuid="30000000-0000-0000-0000-000000000001",
                node_id=held.id,
                event_type="provisioning",
                event="kept",
                created_at=utcnow(),
            )
        )
    db.upgrade()
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(Port)) == 1
        assert session.scalar(select(func.count()).select_from(NodeTrait)) == 1
        assert session.scalar(select(func.count()).select_from(NodeHistory)) == 1
        ids = dict(session.execute(select(Node.uuid, Node.allocation_id)).all())
    assert ids[held.uuid] == allocation.id
    assert ids[dangling.uuid] is None
    # Enforced from now on, both ways.
    with pytest.raises(IntegrityError), db.write() as session:
        session.execute(update(Node).where(Node.uuid == held.uuid).values(allocation_id=999))
    with db.write() as session:
        session.execute(delete(Allocation).where(Allocation.id == allocation.id))
    with db.read() as session:
        assert session.scalar(select(Node.allocation_id).where(Node.uuid == held.uuid)) is None
    db.dispose()
