"""The filter computed from the database: who may boot the inspection image."""

from __future__ import annotations

from sqlalchemy import delete, update

from metalforge import inspection_states as ins
from metalforge.db.engine import Database
from metalforge.db.models import Node
from metalforge.pxe_filter.desired import BLOCK_ALL, FilterState, desired_state, for_host
from tests.pxe_filter.conftest import add_node, boot_ramdisk, end_ramdisk, mac, set_inspection


def _state(db: Database, discovery: bool = False) -> FilterState:
    with db.read() as session:
        return desired_state(session, discovery=discovery)


def test_nodes_booting_the_ramdisk_are_allowed_every_other_known_mac_denied(db: Database) -> None:
    starting = add_node(db, mac(1), inspection=ins.STARTING)
    add_node(db, mac(2), mac(3), inspection=ins.WAITING)
    for index, state in enumerate(
        (ins.PROCESSING, ins.FINISHED, ins.ERROR, ins.REAPPLYING, ins.ENROLLING), start=4
    ):
        add_node(db, mac(index), inspection=state)
    add_node(db, mac(10))  # never inspected
    found = _state(db)
    assert found.allowed == {mac(1), mac(2), mac(3)}
    assert found.denied == {mac(i) for i in (4, 5, 6, 7, 8, 10)}
    assert found.unknown_allowed is False
    set_inspection(db, starting, ins.FINISHED)
    assert mac(1) in _state(db).denied


def test_nodes_a_conductor_boots_the_agent_on_are_allowed_while_it_boots(db: Database) -> None:
    cleaning = add_node(db, mac(1), mac(2))
    deploying = add_node(db, mac(3))
    finished = add_node(db, mac(4))
    boot_ramdisk(db, cleaning, "clean wait")
    boot_ramdisk(db, deploying, "deploying")
    # A session left behind by a flow that moved on lets nobody through.
    boot_ramdisk(db, finished, "clean wait")
    with db.write() as session:
        moved_on = update(Node).where(Node.uuid == finished).values(provision_state="available")
        session.execute(moved_on)
    found = _state(db)
    assert found.allowed == {mac(1), mac(2), mac(3)}
    assert found.denied == {mac(4)}
    end_ramdisk(db, cleaning, "available")
    found = _state(db)
    assert found.allowed == {mac(3)}
    assert found.denied == {mac(1), mac(2), mac(4)}


def test_a_rescued_node_keeps_its_address_after_the_agent_session_ends(db: Database) -> None:
    rescuing = add_node(db, mac(1))
    add_node(db, mac(2))
    boot_ramdisk(db, rescuing, "rescue wait")
    assert _state(db).allowed == {mac(1)}
    end_ramdisk(db, rescuing, "rescue")
    assert _state(db).allowed == {mac(1)}, "its rescue system renews its lease"
    with db.write() as session:
        session.execute(update(Node).where(Node.uuid == rescuing).values(provision_state="active"))
    assert _state(db).allowed == frozenset()
    assert _state(db).denied == {mac(1), mac(2)}


def test_unknown_machines_are_allowed_only_with_discovery(db: Database) -> None:
    add_node(db, mac(1))
    assert _state(db, discovery=False).unknown_allowed is False
    assert _state(db, discovery=True).unknown_allowed is True


def test_a_deleted_nodes_macs_become_unknown(db: Database) -> None:
    uuid = add_node(db, mac(1), inspection=ins.WAITING)
    with db.write() as session:
        session.execute(delete(Node).where(Node.uuid == uuid))
    assert _state(db) == FilterState(frozenset(), frozenset(), unknown_allowed=False)


def test_only_the_leader_answers_any_other_host_blocks_with_every_mac_denied() -> None:
    cluster = FilterState(frozenset({mac(1)}), frozenset({mac(2)}), unknown_allowed=True)
    assert for_host(cluster, leading=True) == cluster
    other = for_host(cluster, leading=False)
    assert other == FilterState(frozenset(), frozenset({mac(1), mac(2)}), unknown_allowed=False)
    assert other.blocking
    assert BLOCK_ALL.blocking
    assert not cluster.blocking
