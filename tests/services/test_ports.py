"""Ports through the service functions, without HTTP.

The API's tests cover the routes (fields per version, policy, bodies);
these call ``services.ports`` directly and check the rules on the port's
node: a held node is refused, a node changed since it was read is not
written over, the epoch of every node a write touches is bumped, and only a
node that does not exist reads as "could not be found".
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import select, update

from metalforge import states
from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db.engine import Database
from metalforge.db.models import Node, Port
from metalforge.errors import NodeLocked, RequestError, bad_request
from metalforge.services import lookup, patching
from metalforge.services import ports as port_service
from metalforge.services.caller import NODE_GET, NodeTarget, Target
from metalforge.services.context import Services
from metalforge.services.patching import Operation
from metalforge.services.ports import NewPort
from metalforge.startup import build_registry
from tests.services.conftest import FakeCaller, bump_after_find
from tests.support.stack import test_settings

ONE = "00000000-0000-0000-0000-0000000000b1"
TWO = "00000000-0000-0000-0000-0000000000b2"
OTHERS = "00000000-0000-0000-0000-0000000000b3"
MISSING = "00000000-0000-0000-0000-0000000000ff"
LATEST = (1, 101)
MAC = "52:54:00:AA:00:01"


@pytest.fixture
def svc(db: Database, db_url: str) -> Services:
    settings = test_settings(db_url)
    directory = ConductorDirectory(db, settings.conductor.heartbeat_timeout)
    with db.write() as session:
        for uuid, name, owner in ((ONE, "one", "ops"), (TWO, "two", "ops"), (OTHERS, None, "lab")):
            session.add(
                Node(
                    uuid=uuid,
                    name=name,
                    owner=owner,
                    driver="fake-hardware",
                    provision_state=states.ENROLL,
                )
            )
    return Services(settings=settings, db=db, drivers=build_registry(settings), directory=directory)


def _create(svc: Services, node: str = ONE, address: str = MAC, **fields: Any) -> Port:
    new = NewPort(node=node, address=address, **fields)
    return port_service.create_port(svc, new, LATEST, caller=FakeCaller())


def _epoch(svc: Services, uuid: str) -> int:
    with svc.db.read() as session:
        return session.scalars(select(Node.epoch).where(Node.uuid == uuid)).one()


def _ports(svc: Services) -> list[tuple[str, str]]:
    """Every stored port as (address, its node's UUID)."""
    with svc.db.read() as session:
        return [(p.address, p.node.uuid) for p in session.scalars(select(Port).order_by(Port.id))]


def _reserve(svc: Services, uuid: str, holder: str | None = "conductor-1") -> None:
    with svc.db.write() as session:
        session.execute(update(Node).where(Node.uuid == uuid).values(reservation=holder))


def _moved_to(node_uuid: str) -> list[Operation]:
    """A patch that only moves the port to ``node_uuid``."""
    return [Operation("replace", "/node_uuid", node_uuid, given=True)]


def _refusal(excinfo: pytest.ExceptionInfo[RequestError]) -> tuple[int, str]:
    return excinfo.value.status, excinfo.value.message


def test_create_stores_the_port_and_bumps_its_nodes_epoch(svc: Services) -> None:
    port = _create(svc, node="one", name="eth0")
    assert (port.address, port.node.uuid, port.name) == ("52:54:00:aa:00:01", ONE, "eth0")
    assert _ports(svc) == [("52:54:00:aa:00:01", ONE)]
    assert (_epoch(svc, ONE), _epoch(svc, TWO)) == (1, 0)


def test_create_on_a_node_a_conductor_holds_is_refused(svc: Services) -> None:
    _reserve(svc, ONE)
    with pytest.raises(NodeLocked, match="locked by host conductor-1"):
        _create(svc)
    assert _ports(svc) == []
    assert _epoch(svc, ONE) == 0


def test_create_on_a_node_changed_since_it_was_read_is_409(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    bump_after_find(monkeypatch)
    with pytest.raises(RequestError) as refused:
        _create(svc)
    assert not isinstance(refused.value, NodeLocked)
    assert refused.value.status == 409
    assert _ports(svc) == []


@pytest.mark.parametrize("hidden", [False, True], ids=["missing", "hidden"])
def test_a_missing_or_hidden_node_is_a_bad_request_after_the_rule(
    svc: Services, hidden: bool
) -> None:
    blind = FakeCaller(lambda rule, target: rule != NODE_GET)
    node = ONE if hidden else MISSING
    new = NewPort(node=node, address=MAC)
    with pytest.raises(RequestError) as refused:
        port_service.create_port(svc, new, LATEST, caller=blind)
    assert _refusal(refused) == (400, f"Node {node} could not be found.")
    create = [target for rule, target in blind.asked if rule == port_service.CREATE]
    assert create == [NodeTarget(None, None)]


def test_the_create_rule_is_asked_on_the_nodes_owner_before_anything_is_written(
    svc: Services,
) -> None:
    def allow(rule: str, target: Target) -> bool:
        return rule != port_service.CREATE or target.owner != "ops"

    caller = FakeCaller(allow)
    new = NewPort(node=ONE, address=MAC)
    with pytest.raises(RequestError) as refused:
        port_service.create_port(svc, new, LATEST, caller=caller)
    assert _refusal(refused) == (
        403,
        "Access was denied to the following resource: baremetal:port:create",
    )
    assert caller.asked[-1] == (port_service.CREATE, NodeTarget("ops", None))
    assert _ports(svc) == []


def test_a_refusal_other_than_a_missing_node_keeps_its_own_answer(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bug fixed: every error finding the node used to read "could not be found"."""

    def find_refused(*args: Any, **kwargs: Any) -> Node:
        raise bad_request("Node names are case sensitive here.")

    monkeypatch.setattr(lookup, "find_node", find_refused)
    with pytest.raises(RequestError) as refused:
        _create(svc, node="One")
    assert _refusal(refused) == (400, "Node names are case sensitive here.")


def test_a_duplicate_address_is_409_naming_it(svc: Services) -> None:
    _create(svc)
    with pytest.raises(RequestError) as refused:
        _create(svc, node=TWO, address="52-54-00-aa-00-01")
    assert _refusal(refused) == (409, "A port with MAC address 52:54:00:aa:00:01 already exists.")
    assert _epoch(svc, TWO) == 0


def test_an_address_that_is_no_mac_is_refused(svc: Services) -> None:
    with pytest.raises(RequestError) as refused:
        _create(svc, address="not-a-mac")
    assert _refusal(refused) == (400, "Expected a MAC address but received not-a-mac.")


def test_patch_moves_the_port_and_bumps_both_nodes(svc: Services) -> None:
    port = _create(svc)
    moved = port_service.patch_port(svc, port.uuid, LATEST, _moved_to(TWO), caller=FakeCaller())
    assert moved.node.uuid == TWO
    assert _ports(svc) == [("52:54:00:aa:00:01", TWO)]
    assert (_epoch(svc, ONE), _epoch(svc, TWO)) == (2, 1)


def test_patch_naming_the_same_node_by_name_does_not_move_it(svc: Services) -> None:
    port = _create(svc)
    port_service.patch_port(svc, port.uuid, LATEST, _moved_to("one"), caller=FakeCaller())
    assert _ports(svc) == [("52:54:00:aa:00:01", ONE)]
    assert _epoch(svc, ONE) == 2


def test_patch_changes_the_ports_values(svc: Services) -> None:
    port = _create(svc)

    patch = [
        Operation("replace", "/address", "52:54:00:AA:00:02", given=True),
        Operation("replace", "/pxe_enabled", "False", given=True),
    ]
    changed = port_service.patch_port(svc, port.uuid, LATEST, patch, caller=FakeCaller())
    assert (changed.address, changed.pxe_enabled, changed.updated_at is not None) == (
        "52:54:00:aa:00:02",
        False,
        True,
    )


def test_patch_onto_a_held_node_is_refused(svc: Services) -> None:
    port = _create(svc)
    _reserve(svc, TWO)
    with pytest.raises(NodeLocked):
        port_service.patch_port(svc, port.uuid, LATEST, _moved_to(TWO), caller=FakeCaller())
    assert _ports(svc) == [("52:54:00:aa:00:01", ONE)]
    assert (_epoch(svc, ONE), _epoch(svc, TWO)) == (1, 0)


def test_patch_onto_another_owners_node_is_refused(svc: Services) -> None:
    port = _create(svc)
    with pytest.raises(RequestError) as refused:
        port_service.patch_port(svc, port.uuid, LATEST, _moved_to(OTHERS), caller=FakeCaller())
    assert refused.value.status == 400
    assert f"Unable to apply the requested node_uuid '{OTHERS}'" in refused.value.message
    assert _ports(svc) == [("52:54:00:aa:00:01", ONE)]


def test_patch_onto_a_hidden_node_reads_as_missing(svc: Services) -> None:
    port = _create(svc)
    with pytest.raises(RequestError) as refused:
        port_service.patch_port(
            svc, port.uuid, LATEST, _moved_to(TWO), caller=FakeCaller(lambda *_: False)
        )
    assert _refusal(refused) == (400, f"Node {TWO} could not be found.")


def test_delete_is_fenced(svc: Services) -> None:
    port = _create(svc)
    _reserve(svc, ONE)
    with pytest.raises(NodeLocked):
        port_service.delete_port(svc, port.uuid, LATEST)
    assert len(_ports(svc)) == 1
    _reserve(svc, ONE, None)
    port_service.delete_port(svc, port.uuid, LATEST)
    assert _ports(svc) == []
    assert _epoch(svc, ONE) == 2


def test_a_missing_port_is_404(svc: Services) -> None:
    with pytest.raises(RequestError) as refused:
        port_service.delete_port(svc, MISSING, LATEST)
    assert _refusal(refused) == (404, f"Port {MISSING} could not be found.")


def test_ports_moved_both_ways_at_once_take_turns(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two patches moving ports in opposite directions lock the two nodes in one order.

    Each patch used to lock its port's node, read the patch, then lock the
    other node: with both patches between those two locks (the barrier holds
    them there) PostgreSQL found a deadlock and cancelled one. SQLite's
    writers take turns, so there the barrier is left out.
    """
    first = _create(svc, ONE, "52:54:00:aa:00:11")
    second = _create(svc, TWO, "52:54:00:aa:00:12")
    meet = None if svc.db.is_sqlite else threading.Barrier(2, timeout=30)
    failures: list[BaseException] = []

    def apply_when_both_read(document: dict[str, Any], ops: list[Operation]) -> dict[str, Any]:
        if meet is not None:
            meet.wait()
        return patching.apply(document, ops)

    monkeypatch.setattr(port_service, "apply", apply_when_both_read)

    def shuttle(port: Port, target: str) -> None:
        try:
            port_service.patch_port(svc, port.uuid, LATEST, _moved_to(target), caller=FakeCaller())
        except BaseException as exc:  # noqa: BLE001 - the test asserts there were none
            failures.append(exc)

    threads = [
        threading.Thread(target=shuttle, args=(first, TWO)),
        threading.Thread(target=shuttle, args=(second, ONE)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(_ports(svc)) == sorted([(first.address, TWO), (second.address, ONE)])


@pytest.mark.parametrize(
    ("path", "version", "status", "message"),
    [
        (
            "/internal_info",
            LATEST,
            400,
            "Cannot patch /internal_info. Only the following can be updated: address, "
            "available_for_dynamic_portgroup, category, description, extra, is_smartnic, "
            "local_link_connection, name, node_uuid, physical_network, portgroup_uuid, "
            "pxe_enabled, vendor",
        ),
        ("/name", (1, 87), 406, "Field name is not available at API version 1.87"),
    ],
)
def test_a_patch_outside_the_policy_is_refused_before_the_port_is_read(
    svc: Services, path: str, version: tuple[int, int], status: int, message: str
) -> None:
    patch = [Operation("replace", path, "x", given=True)]
    with pytest.raises(RequestError) as refused:
        port_service.patch_port(svc, MISSING, version, patch, caller=FakeCaller())
    assert _refusal(refused) == (status, message)
