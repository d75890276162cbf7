"""Enrolling, updating and deleting nodes through ``services.nodes``, without HTTP.

The API's tests cover parsing and authorization; these call the service
directly and read back the rows it wrote (or left): the defaults a new node
gets, the fenced update and its history, and what a delete takes with it.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest
from sqlalchemy import func, select, update

from metalforge import states
from metalforge.db.engine import Database
from metalforge.db.models import INTERFACES, Node, NodeHistory, NodeTrait, Port
from metalforge.errors import NodeLocked, RequestError
from metalforge.services import nodes
from metalforge.services.context import Services
from metalforge.services.patching import Operation
from tests.services.conftest import (
    FakeCaller,
    add_node,
    bump_after_find,
    history_by_user,
    refused,
    services_on,
)

LATEST = (1, 115)
COLUMNS = ("uuid", "name", "provision_state", "resource_class")
RESOURCE_CLASS = "baremetal-gold"


@pytest.fixture
def svc(db: Database, db_url: str, wakes: list[str]) -> Services:
    """Services whose conductor settings give new nodes a default resource class."""
    return services_on(db, db_url, wakes, default_resource_class=RESOURCE_CLASS)


def _enroll(svc: Services, actor: str | None = "alice", **given: Any) -> Any:
    return nodes.enroll(svc, {"driver": "fake-hardware", **given}, LATEST, COLUMNS, actor)


def _add_node(svc: Services, state: str = states.MANAGEABLE, **fields: Any) -> Node:
    return add_node(svc, state, **fields)


def _stored(svc: Services, uuid: str) -> Node | None:
    with svc.db.read() as session:
        return session.scalars(select(Node).where(Node.uuid == uuid)).one_or_none()


def _node(svc: Services, uuid: str) -> Node:
    node = _stored(svc, uuid)
    assert node is not None
    return node


def _count(svc: Services, model: type[Node | Port | NodeTrait | NodeHistory]) -> int:
    with svc.db.read() as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def _setting(**values: Any) -> list[Operation]:
    """A JSON patch replacing each of ``values``."""
    return [Operation("replace", f"/{name}", value, given=True) for name, value in values.items()]


def _update(svc: Services, ident: str, ops: list[Operation], **kwargs: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"reset_interfaces": None, "caller": FakeCaller(), "actor": "bob"}
    options.update(kwargs)
    return nodes.update(
        svc,
        ident,
        LATEST,
        ops,
        lambda node, _steps: {"description": node.description, "epoch": node.epoch},
        **options,
    )


# -- enroll ---------------------------------------------------------------------


def test_enroll_gives_the_settings_resource_class_and_the_drivers_interfaces(
    svc: Services,
) -> None:
    row = _enroll(svc, name="rack1-n1")
    assert (row.name, row.provision_state, row.resource_class) == (
        "rack1-n1",
        states.ENROLL,
        RESOURCE_CLASS,
    )
    assert str(uuidlib.UUID(row.uuid)) == row.uuid
    node = _node(svc, row.uuid)
    assert (node.name, node.provision_state, node.resource_class) == (
        "rack1-n1",
        states.ENROLL,
        RESOURCE_CLASS,
    )
    hardware = svc.drivers.hardware_type("fake-hardware")
    stored = {family: getattr(node, f"{family}_interface") for family in INTERFACES}
    assert stored == {family: hardware.default(family).name for family in INTERFACES}
    assert (stored["power"], stored["raid"], stored["network"]) == ("fake", "fake", "noop")
    assert (node.driver_info, node.extra, node.instance_info, node.properties) == ({}, {}, {}, {})
    assert (node.conductor_group, node.epoch, node.reservation) == ("", 0, None)
    assert history_by_user(svc, node.id) == [("provisioning", "node enrolled in enroll", "alice")]


def test_enroll_keeps_what_was_given(svc: Services) -> None:
    given = str(uuidlib.uuid4()).upper()
    row = _enroll(
        svc,
        uuid=given,
        resource_class="baremetal-small",
        raid_interface="no-raid",
        conductor_group="Rack-A",
        driver_info={"fake_step_delay": 0},
    )
    assert row.uuid == given.lower()
    node = _node(svc, given.lower())
    assert (node.resource_class, node.raid_interface, node.power_interface) == (
        "baremetal-small",
        "no-raid",
        "fake",
    )
    assert (node.conductor_group, node.driver_info) == ("rack-a", {"fake_step_delay": 0})


def test_enroll_before_1_11_makes_an_available_node(svc: Services) -> None:
    row = nodes.enroll(svc, {"driver": "fake-hardware"}, (1, 10), COLUMNS, None)
    node = _node(svc, row.uuid)
    assert (node.provision_state, node.power_state) == (states.AVAILABLE, None)


def test_a_duplicate_name_is_409_and_stores_nothing(svc: Services) -> None:
    first = _enroll(svc, name="rack1-n1")
    with pytest.raises(RequestError) as raised:
        _enroll(svc, name="rack1-n1", actor="bob")
    assert refused(409, raised) == "A node with name rack1-n1 already exists."
    assert _count(svc, Node) == 1
    assert [user for _, _, user in history_by_user(svc, _node(svc, first.uuid).id)] == ["alice"]


def test_a_duplicate_uuid_is_409(svc: Services) -> None:
    first = _enroll(svc, name="one")
    with pytest.raises(RequestError) as raised:
        _enroll(svc, name="two", uuid=first.uuid)
    assert refused(409, raised) == f"A node with UUID {first.uuid} already exists."
    assert _count(svc, Node) == 1


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"driver": "ipmi"}, "No valid host was found"),
        ({"raid_interface": "hw-raid-9000"}, "hw-raid-9000"),
        ({"name": "not a name"}, "Expected a logical name"),
        ({"name": "maintenance"}, "Cannot use reserved name maintenance"),
        ({"conductor_group": "rack a"}, "Invalid conductor_group"),
    ],
)
def test_enroll_refuses_bad_values_and_stores_nothing(
    svc: Services, given: dict[str, Any], words: str
) -> None:
    with pytest.raises(RequestError) as raised:
        _enroll(svc, **given)
    assert words in refused(400, raised)
    assert _count(svc, Node) == 0
    assert _count(svc, NodeHistory) == 0


# -- update -------------------------------------------------------------------------


def test_update_applies_the_patch_fenced_and_recorded(svc: Services) -> None:
    node = _add_node(svc, name="rack1-n1")
    patch = [
        *_setting(description="rack 1, slot 1"),
        Operation("add", "/extra/team", "ops", given=True),
    ]
    rendered = _update(svc, "rack1-n1", patch)
    assert rendered == {"description": "rack 1, slot 1", "epoch": node.epoch + 1}
    stored = _node(svc, node.uuid)
    assert (stored.description, stored.extra, stored.epoch) == (
        "rack 1, slot 1",
        {"team": "ops"},
        node.epoch + 1,
    )
    assert history_by_user(svc, node.id) == [("update", "updated description, extra", "bob")]


def test_a_patch_that_changes_nothing_writes_nothing(svc: Services) -> None:
    node = _add_node(svc, reservation="conductor-1")
    _update(svc, node.uuid, _setting())
    assert _node(svc, node.uuid).epoch == node.epoch
    assert history_by_user(svc, node.id) == []


def test_maintenance_off_by_update_clears_its_reason_and_fault(svc: Services) -> None:
    node = _add_node(
        svc, maintenance=True, maintenance_reason="BMC unreachable", fault="power failure"
    )
    _update(svc, node.uuid, _setting(maintenance=False))
    stored = _node(svc, node.uuid)
    assert (stored.maintenance, stored.maintenance_reason, stored.fault) == (False, None, None)
    assert history_by_user(svc, node.id) == [
        ("update", "updated fault, maintenance, maintenance_reason", "bob")
    ]


def test_a_new_driver_interface_is_checked_and_stored(svc: Services) -> None:
    node = _add_node(svc, raid_interface="fake")
    _update(svc, node.uuid, _setting(raid_interface="no-raid"))
    assert _node(svc, node.uuid).raid_interface == "no-raid"
    with pytest.raises(RequestError) as raised:
        _update(svc, node.uuid, _setting(raid_interface="hw-raid-9000"))
    assert "hw-raid-9000" in refused(400, raised)
    stored = _node(svc, node.uuid)
    assert (stored.raid_interface, stored.epoch) == ("no-raid", node.epoch + 1)


def test_reset_interfaces_without_a_driver_change_is_400(svc: Services) -> None:
    node = _add_node(svc)
    with pytest.raises(RequestError) as raised:
        _update(svc, node.uuid, _setting(description="x"), reset_interfaces=True)
    assert "reset_interfaces parameter can only be used" in refused(400, raised)
    stored = _node(svc, node.uuid)
    assert (stored.description, stored.epoch) == (None, node.epoch)


def test_update_to_a_name_another_node_has_is_409(svc: Services) -> None:
    _add_node(svc, name="taken")
    node = _add_node(svc, name="mine")
    with pytest.raises(RequestError) as raised:
        _update(svc, node.uuid, _setting(name="taken"))
    assert refused(409, raised) == "A node with name taken already exists."
    stored = _node(svc, node.uuid)
    assert (stored.name, stored.epoch) == ("mine", node.epoch)
    assert history_by_user(svc, node.id) == []


@pytest.mark.parametrize(
    ("state", "target"),
    [(states.CLEANING, states.AVAILABLE), (states.DEPLOY_WAIT, states.ACTIVE)],
)
def test_a_node_in_a_transition_is_not_updated(svc: Services, state: str, target: str) -> None:
    node = _add_node(svc, state, target_provision_state=target)
    with pytest.raises(RequestError) as raised:
        _update(svc, node.uuid, _setting(description="x"))
    assert not isinstance(raised.value, NodeLocked)
    assert "while a state transition is in progress" in refused(409, raised)
    stored = _node(svc, node.uuid)
    assert (stored.description, stored.epoch) == (None, node.epoch)
    assert history_by_user(svc, node.id) == []


def test_a_node_whose_transition_allows_updates_is_updated(svc: Services) -> None:
    node = _add_node(svc, states.INSPECT_WAIT, target_provision_state=states.MANAGEABLE)
    _update(svc, node.uuid, _setting(description="x"))
    assert _node(svc, node.uuid).description == "x"


def test_a_node_a_conductor_holds_is_refused_unchanged(svc: Services) -> None:
    node = _add_node(svc, reservation="conductor-1")
    with pytest.raises(NodeLocked, match="locked by host conductor-1"):
        _update(svc, node.uuid, _setting(description="x"))
    stored = _node(svc, node.uuid)
    assert (stored.description, stored.epoch, stored.reservation) == (
        None,
        node.epoch,
        "conductor-1",
    )
    assert history_by_user(svc, node.id) == []


def test_a_node_changed_since_it_was_read_is_not_written_over(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _add_node(svc)
    bump_after_find(monkeypatch)
    with pytest.raises(RequestError) as raised:
        _update(svc, node.uuid, _setting(description="x"))
    assert "changed while it was being updated" in refused(409, raised)
    stored = _node(svc, node.uuid)
    assert (stored.description, stored.epoch) == (None, node.epoch)


# -- delete -------------------------------------------------------------------------


def _with_ports_and_traits(svc: Services, node: Node, macs: list[str], traits: list[str]) -> None:
    with svc.db.write() as session:
        session.add_all(
            Port(uuid=str(uuidlib.uuid4()), address=mac, node_id=node.id) for mac in macs
        )
        session.add_all(NodeTrait(node_id=node.id, trait=t) for t in traits)


def test_delete_takes_the_ports_and_traits_with_the_node(svc: Services) -> None:
    doomed = _add_node(svc, name="doomed")
    kept = _add_node(svc, name="kept")
    _with_ports_and_traits(svc, doomed, ["52:54:00:00:00:01", "52:54:00:00:00:02"], ["CUSTOM_A"])
    _with_ports_and_traits(svc, kept, ["52:54:00:00:00:03"], ["CUSTOM_A", "CUSTOM_B"])
    nodes.delete_node(svc, "doomed", LATEST)
    assert _stored(svc, doomed.uuid) is None
    with svc.db.read() as session:
        assert list(session.scalars(select(Port.address))) == ["52:54:00:00:00:03"]
        assert sorted(
            tuple(r) for r in session.execute(select(NodeTrait.node_id, NodeTrait.trait))
        ) == [
            (kept.id, "CUSTOM_A"),
            (kept.id, "CUSTOM_B"),
        ]
    assert _node(svc, kept.uuid).epoch == kept.epoch


def test_a_protected_node_is_not_deleted(svc: Services) -> None:
    node = _add_node(svc, protected=True, maintenance=True)
    _with_ports_and_traits(svc, node, ["52:54:00:00:00:01"], ["CUSTOM_A"])
    with pytest.raises(RequestError) as raised:
        nodes.delete_node(svc, node.uuid, LATEST)
    assert f"Node {node.uuid} is protected" in refused(403, raised)
    assert _stored(svc, node.uuid) is not None
    assert (_count(svc, Port), _count(svc, NodeTrait)) == (1, 1)


def test_an_active_node_is_deleted_only_in_maintenance(svc: Services) -> None:
    node = _add_node(svc, states.ACTIVE)
    _with_ports_and_traits(svc, node, ["52:54:00:00:00:01"], ["CUSTOM_A"])
    with pytest.raises(RequestError) as raised:
        nodes.delete_node(svc, node.uuid, LATEST)
    message = refused(409, raised)
    assert f'Can not delete node {node.uuid} while it is in provision state "active"' in message
    assert _stored(svc, node.uuid) is not None
    assert (_count(svc, Port), _count(svc, NodeTrait)) == (1, 1)
    with svc.db.write() as session:
        session.execute(update(Node).where(Node.id == node.id).values(maintenance=True))
    nodes.delete_node(svc, node.uuid, LATEST)
    assert _stored(svc, node.uuid) is None
    assert (_count(svc, Port), _count(svc, NodeTrait)) == (0, 0)


def test_a_node_with_an_instance_is_deleted_only_in_maintenance(svc: Services) -> None:
    instance = str(uuidlib.uuid4())
    node = _add_node(svc, states.MANAGEABLE, instance_uuid=instance)
    with pytest.raises(RequestError) as raised:
        nodes.delete_node(svc, node.uuid, LATEST)
    assert f"is associated with instance {instance}" in refused(409, raised)
    assert _stored(svc, node.uuid) is not None


def test_available_may_not_be_deleted_when_the_settings_say_so(svc: Services) -> None:
    node = _add_node(svc, states.AVAILABLE)
    api = svc.settings.api.model_copy(update={"allow_delete_available": False})
    strict = Services(
        settings=svc.settings.model_copy(update={"api": api}),
        db=svc.db,
        drivers=svc.drivers,
        directory=svc.directory,
    )
    with pytest.raises(RequestError) as raised:
        nodes.delete_node(strict, node.uuid, LATEST)
    message = refused(409, raised)
    assert "Valid provision states to start deletion are: adopt failed, enroll, manageable" in (
        message
    )
    assert _stored(svc, node.uuid) is not None
    nodes.delete_node(svc, node.uuid, LATEST)
    assert _stored(svc, node.uuid) is None


def test_a_node_a_conductor_holds_is_not_deleted(svc: Services) -> None:
    node = _add_node(svc, reservation="conductor-1")
    _with_ports_and_traits(svc, node, ["52:54:00:00:00:01"], ["CUSTOM_A"])
    with pytest.raises(NodeLocked, match="locked by host conductor-1"):
        nodes.delete_node(svc, node.uuid, LATEST)
    assert _stored(svc, node.uuid) is not None
    assert (_count(svc, Port), _count(svc, NodeTrait)) == (1, 1)


def test_a_node_changed_since_it_was_read_is_not_deleted(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _add_node(svc)
    _with_ports_and_traits(svc, node, ["52:54:00:00:00:01"], ["CUSTOM_A"])
    bump_after_find(monkeypatch)
    with pytest.raises(RequestError) as raised:
        nodes.delete_node(svc, node.uuid, LATEST)
    assert "changed while it was being deleted" in refused(409, raised)
    assert _stored(svc, node.uuid) is not None
    assert (_count(svc, Port), _count(svc, NodeTrait)) == (1, 1), "the ports go only with it"
