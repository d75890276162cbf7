"""Schema upgrades keep the data: a table rebuilt on SQLite loses none of its neighbours' rows."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import Table, delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge.db import flow_progress
from metalforge.db.engine import Database
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import Allocation, Node, NodeHistory, NodeTrait, Port, utcnow


def _node(uuid_tail: str) -> Node:
    return Node(
        uuid=f"00000000-0000-0000-0000-{uuid_tail:0>12}",
        driver="fake-hardware",
        provision_state="active",
        epoch=0,
    )


def _add_each(session: Session, *nodes: Node) -> None:
    """Insert the nodes with only the columns given (and their defaults): the ORM would
    name every column of today's model, and the schema these tests start from lacks the
    newest (``health``). The objects stay outside the session, their ``id`` set."""
    table = Node.__table__
    assert isinstance(table, Table)
    for node in nodes:
        values = {c.key: v for c in table.columns if (v := node.__dict__.get(c.key)) is not None}
        node.id = session.execute(insert(table).values(**values).returning(table.c.id)).scalar_one()


def test_the_allocation_foreign_keys_keep_data_and_clear_dangling_references(
    db_url: str,
) -> None:
    db = Database(db_url)
    db.upgrade("0005")
    with db.write() as session:
        held, dangling = _node("1"), _node("2")
        _add_each(session, held, dangling)
        allocation = Allocation(
            uuid="10000000-0000-0000-0000-000000000001",
            node_id=held.id,
            resource_class="baremetal",
            state="active",
            created_at=utcnow(),
        )
        session.add(allocation)
        session.flush()
        for node, allocation_id in ((held, allocation.id), (dangling, allocation.id + 100)):
            # (nothing enforced the dangling reference before)
            session.execute(
                update(Node).where(Node.id == node.id).values(allocation_id=allocation_id)
            )
        # Only the columns ports had at 0005 (the model has gained some since).
        session.execute(
            text(
                "INSERT INTO ports (uuid, address, node_id, pxe_enabled, local_link_connection, "
                "internal_info, extra, is_smartnic, created_at) VALUES "
                "('20000000-0000-0000-0000-000000000001', '52:54:00:00:00:01', :node, true, "
                "'{}', '{}', '{}', false, CURRENT_TIMESTAMP)"
            ),
            {"node": held.id},
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


_FLOW_MIGRATION = importlib.import_module("metalforge.db.migrations.versions.0008_flow_progress")

_STEP = {"interface": "deploy", "step": "erase_devices", "priority": 10, "args": {}}
_MID_CLEAN = {
    "clean_steps": [_STEP],
    "clean_step_index": 1,
    "clean_prepared": True,
    "step_started_at": 100.0,
    "step_heartbeat_at": 160.0,
    "agent_cached_clean_steps": [_STEP],
    "bios_settings": {"boot_mode": "uefi"},
}
_REQUESTED_DEPLOY = {"requested_deploy_steps": [_STEP], "redfish_virtual_media": "x.iso"}


def test_flow_progress_leaves_driver_internal_info_with_the_node_in_its_place(
    db_url: str,
) -> None:
    db = Database(db_url)
    db.upgrade("0007")
    with db.write() as session:
        cleaning, deploying, idle = _node("1"), _node("2"), _node("3")
        cleaning.provision_state, cleaning.driver_internal_info = "clean wait", _MID_CLEAN
        deploying.provision_state, deploying.driver_internal_info = "deploying", _REQUESTED_DEPLOY
        idle.driver_internal_info = {"bios_settings": {}}
        _add_each(session, cleaning, deploying, idle)
    db.upgrade()
    with db.read() as session:
        info: dict[str, dict[str, Any]] = dict(
            session.execute(select(Node.uuid, Node.driver_internal_info)).all()
        )
        ids = dict(session.execute(select(Node.uuid, Node.id)).all())
        found = flow_progress.load_many(session.connection(), ids.values())
    # The drivers' keys stay; the flow's moved.
    assert info[cleaning.uuid] == {
        "agent_cached_clean_steps": [_STEP],
        "bios_settings": {"boot_mode": "uefi"},
    }
    assert info[deploying.uuid] == {"redfish_virtual_media": "x.iso"}
    assert info[idle.uuid] == {"bios_settings": {}}
    assert found[ids[cleaning.uuid]] == FlowProgress(
        flow="clean",
        plan=(_STEP,),
        step_index=1,
        ramdisk_prepared=True,
        step_started_at=100.0,
        step_heartbeat_at=160.0,
    )
    assert found[ids[deploying.uuid]] == FlowProgress(flow="deploy", requested=(_STEP,))
    assert ids[idle.uuid] not in found
    db.dispose()


@pytest.mark.parametrize("info", [_MID_CLEAN, _REQUESTED_DEPLOY, {"clean_preparing_since": 5.0}])
def test_a_downgrade_puts_the_flow_keys_back(info: dict[str, Any]) -> None:
    moved = _FLOW_MIGRATION.progress_of("clean wait", info)
    row = SimpleNamespace(**moved)
    kept = {k: v for k, v in info.items() if k in ("agent_cached_clean_steps", "bios_settings")}
    kept.update({k: v for k, v in info.items() if k == "redfish_virtual_media"})
    assert {**kept, **_FLOW_MIGRATION.info_of(row)} == info
