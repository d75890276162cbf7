"""Allocations through the service functions, without HTTP.

The API's tests (``tests/api/test_allocations.py``) cover the same rules
through requests and a running conductor; these call
``services.allocations`` directly, with no conductor, and read back what one
transaction left behind: the allocation, the node's side of it, the queued
work and the node's history.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

import pytest
from sqlalchemy import select

from metalforge import states
from metalforge.conductor import allocation_work
from metalforge.db.models import Allocation, Node, NodeHistory, WorkItem
from metalforge.errors import NodeLocked, RequestError
from metalforge.services import allocations
from metalforge.services.allocations import Grant, NewAllocation
from metalforge.services.caller import NODE_GET, AllocationTarget, Target
from metalforge.services.context import Services
from metalforge.services.patching import Operation
from tests.services.conftest import FakeCaller, add_node, refused, stored_node

LATEST = (1, 99)
ANYONE = Grant(owner=None, project=None)
ADMIN = FakeCaller()
"""Sees every node and may do anything (shared: nothing reads what it was asked)."""
ALICE = "alice (project p1)"


def _add_node(svc: Services, **fields: Any) -> Node:
    defaults = {"power_state": "power off", "resource_class": "baremetal", "epoch": 0}
    return add_node(svc, states.AVAILABLE, **{**defaults, **fields})


def _node(svc: Services, node_id: int) -> Node:
    return stored_node(svc, node_id)


def _allocations(svc: Services) -> list[Allocation]:
    with svc.db.read() as session:
        return list(session.scalars(select(Allocation)))


def _work(svc: Services) -> list[WorkItem]:
    with svc.db.read() as session:
        return list(session.scalars(select(WorkItem)))


def _history(svc: Services, node_id: int) -> list[NodeHistory]:
    with svc.db.read() as session:
        query = select(NodeHistory).where(NodeHistory.node_id == node_id)
        return list(session.scalars(query.order_by(NodeHistory.id)))


def _setting(**values: Any) -> list[Operation]:
    """A patch that sets ``values``."""
    return [Operation("replace", f"/{name}", value, given=True) for name, value in values.items()]


def _backfilled(svc: Services, **node_fields: Any) -> tuple[Node, allocations.AllocationRecord]:
    """A deployed node backfilled into a new allocation."""
    node = _add_node(svc, provision_state=states.ACTIVE, **node_fields)
    new = NewAllocation(node=node.uuid, name="held")
    return node, allocations.create_allocation(svc, new, LATEST, ANYONE, caller=ADMIN, actor=ALICE)


# -- create ---------------------------------------------------------------------


def test_creating_an_allocation_queues_its_processing_and_wakes_the_conductors(
    svc: Services,
    wakes: list[str],
) -> None:
    node = _add_node(svc, traits=["CUSTOM_GPU"])
    new = NewAllocation(
        resource_class="baremetal",
        traits=["CUSTOM_GPU", "CUSTOM_GPU"],
        candidate_nodes=[node.uuid, node.uuid],
        name="web-1",
        extra={"k": "v"},
    )
    record = allocations.create_allocation(svc, new, LATEST, ANYONE, caller=ADMIN, actor=ALICE)

    assert record.state == allocation_work.ALLOCATING
    assert record.node_uuid is None
    assert record.traits == ("CUSTOM_GPU",)
    assert record.candidate_nodes == (node.uuid,)
    assert record.created_at is not None
    [stored] = _allocations(svc)
    assert (stored.uuid, stored.name, stored.extra) == (record.uuid, "web-1", {"k": "v"})
    [item] = _work(svc)
    assert item.kind == allocation_work.KIND
    assert item.payload == {"allocation_id": stored.id}
    assert item.dedupe_key == allocation_work.dedupe_key(stored.id)
    assert wakes == ["notify"]
    assert _node(svc, node.id).allocation_id is None  # the conductor picks the node, later


def test_an_allocation_whose_work_cannot_be_queued_is_not_created(
    svc: Services, wakes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queueing happens in the allocation's transaction: never one without the other."""

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("queue unavailable")

    monkeypatch.setattr(allocation_work, "enqueue", broken)
    with pytest.raises(RuntimeError, match="queue unavailable"):
        allocations.create_allocation(
            svc,
            NewAllocation(resource_class="baremetal"),
            LATEST,
            ANYONE,
            caller=ADMIN,
            actor=ALICE,
        )
    assert _allocations(svc) == []
    assert wakes == []


@pytest.mark.parametrize(
    ("new", "status", "message"),
    [
        (NewAllocation(resource_class=" baremetal"), 400, "Invalid resource class"),
        (NewAllocation(resource_class=""), 400, "Invalid resource class"),
        (NewAllocation(), 400, "The resource_class field is mandatory"),
        (NewAllocation(resource_class="rc", traits=["GPU"]), 400, "Invalid trait 'GPU'"),
        (NewAllocation(resource_class="rc", uuid="nope"), 400, "Expected UUID for uuid: nope"),
        (
            NewAllocation(resource_class="rc", name="a b"),
            400,
            "Cannot create allocation with invalid name 'a b'",
        ),
        (
            NewAllocation(resource_class="rc", candidate_nodes=["ghost"]),
            400,
            "Nodes cannot be found",
        ),
    ],
)
def test_a_request_that_cannot_be_met_as_asked_is_refused_and_writes_nothing(
    svc: Services, wakes: list[str], new: NewAllocation, status: int, message: str
) -> None:
    with pytest.raises(RequestError) as excinfo:
        allocations.create_allocation(svc, new, LATEST, ANYONE, caller=ADMIN, actor=ALICE)
    assert message in refused(status, excinfo)
    assert _allocations(svc) == []
    assert _work(svc) == []
    assert wakes == []


def test_fields_newer_than_the_version_are_refused(svc: Services) -> None:
    with pytest.raises(RequestError) as excinfo:
        allocations.create_allocation(
            svc,
            NewAllocation(resource_class="rc", owner="p1"),
            (1, 59),
            ANYONE,
            caller=ADMIN,
            actor=None,
        )
    assert "owner is not available" in refused(406, excinfo)
    with pytest.raises(RequestError) as excinfo:
        allocations.create_allocation(
            svc, NewAllocation(node="n1"), (1, 57), ANYONE, caller=ADMIN, actor=None
        )
    assert "needs API version 1.58" in refused(400, excinfo)


def test_the_grant_decides_the_owner_and_which_nodes_may_be_candidates(svc: Services) -> None:
    mine = _add_node(svc, owner="p1")
    leased = _add_node(svc, lessee="p1")
    other = _add_node(svc, owner="p2")
    grant = Grant(owner="p1", project="p1")
    new = NewAllocation(resource_class="baremetal", candidate_nodes=[other.uuid])
    with pytest.raises(RequestError) as excinfo:
        allocations.create_allocation(svc, new, LATEST, grant, caller=ADMIN, actor=ALICE)
    assert refused(400, excinfo) == f"Nodes cannot be found: {other.uuid}"

    new = NewAllocation(resource_class="baremetal", candidate_nodes=[mine.uuid, leased.uuid])
    record = allocations.create_allocation(svc, new, LATEST, grant, caller=ADMIN, actor=ALICE)
    assert record.owner == "p1"
    assert record.candidate_nodes == (mine.uuid, leased.uuid)


def test_a_taken_name_or_uuid_is_a_conflict(svc: Services) -> None:
    first = allocations.create_allocation(
        svc,
        NewAllocation(resource_class="rc", name="one"),
        LATEST,
        ANYONE,
        caller=ADMIN,
        actor=None,
    )
    for new in (
        NewAllocation(resource_class="rc", name="one"),
        NewAllocation(resource_class="rc", uuid=first.uuid),
    ):
        with pytest.raises(RequestError) as excinfo:
            allocations.create_allocation(svc, new, LATEST, ANYONE, caller=ADMIN, actor=None)
        assert "already exists" in refused(409, excinfo)
    assert len(_allocations(svc)) == 1


# -- backfill -------------------------------------------------------------------


def test_backfilling_attaches_the_deployed_node_fenced_without_queueing(
    svc: Services, wakes: list[str]
) -> None:
    node, record = _backfilled(svc, instance_uuid=str(uuidlib.uuid4()), resource_class="gpu")

    assert record.state == allocation_work.ACTIVE
    assert record.uuid == node.instance_uuid  # the node's instance becomes the allocation
    assert record.resource_class == "gpu"
    assert record.node_uuid == node.uuid
    after = _node(svc, node.id)
    [stored] = _allocations(svc)
    assert (after.instance_uuid, after.allocation_id) == (record.uuid, stored.id)
    assert after.epoch == node.epoch + 1
    assert _work(svc) == []
    assert wakes == []
    [entry] = _history(svc, node.id)
    assert (entry.event_type, entry.user) == ("allocation", ALICE)
    assert entry.event == f"backfilled into allocation {record.uuid}"


def test_backfilling_a_reserved_node_is_refused_as_locked(svc: Services) -> None:
    node = _add_node(svc, provision_state=states.ACTIVE, reservation="conductor-1")
    new = NewAllocation(node=node.uuid)
    with pytest.raises(NodeLocked) as excinfo:
        allocations.create_allocation(svc, new, LATEST, ANYONE, caller=ADMIN, actor=ALICE)
    assert excinfo.value.holder == "conductor-1"
    assert _allocations(svc) == []
    assert _node(svc, node.id).allocation_id is None


@pytest.mark.parametrize(
    ("node_fields", "status", "message"),
    [
        ({"provision_state": states.AVAILABLE}, 400, "backfilling needs an active node"),
        ({"resource_class": "other"}, 400, "its resource class is other"),
        ({"instance_uuid": "0f0f0f0f-0000-4000-8000-000000000000"}, 400, "differs from"),
    ],
)
def test_backfilling_a_node_that_does_not_fit_is_refused(
    svc: Services, node_fields: dict[str, Any], status: int, message: str
) -> None:
    node = _add_node(svc, **{"provision_state": states.ACTIVE, **node_fields})
    new = NewAllocation(node=node.uuid, resource_class="baremetal", uuid=str(uuidlib.uuid4()))
    with pytest.raises(RequestError) as excinfo:
        allocations.create_allocation(svc, new, LATEST, ANYONE, caller=ADMIN, actor=ALICE)
    assert message in refused(status, excinfo)
    assert _allocations(svc) == []
    assert _node(svc, node.id).epoch == node.epoch


def test_a_node_the_caller_cannot_see_is_answered_as_missing(svc: Services) -> None:
    node = _add_node(svc, provision_state=states.ACTIVE, owner="p2")

    def allow(rule: str, target: Target) -> bool:
        return rule != NODE_GET or target.owner != "p2"

    new = NewAllocation(node=node.uuid)
    with pytest.raises(RequestError) as excinfo:
        allocations.create_allocation(
            svc, new, LATEST, ANYONE, caller=FakeCaller(allow), actor=None
        )
    assert refused(400, excinfo) == f"Node {node.uuid} could not be found."


# -- update ---------------------------------------------------------------------


def test_an_edit_renames_and_is_checked_like_a_new_allocation(svc: Services) -> None:
    allocations.create_allocation(
        svc,
        NewAllocation(resource_class="rc", name="taken"),
        LATEST,
        ANYONE,
        caller=ADMIN,
        actor=None,
    )
    record = allocations.create_allocation(
        svc,
        NewAllocation(resource_class="rc", name="old"),
        LATEST,
        ANYONE,
        caller=ADMIN,
        actor=None,
    )
    renamed = allocations.update_allocation(
        svc, "old", LATEST, _setting(name="new", extra={"a": 1})
    )
    assert (renamed.uuid, renamed.name, renamed.extra) == (record.uuid, "new", {"a": 1})
    assert renamed.updated_at is not None

    for patch, status, message in (
        (_setting(name="taken"), 409, "An allocation with name taken already exists."),
        (_setting(name=5), 400, "Invalid value for name: must be a string"),
        (_setting(extra=[1]), 400, "Invalid value for extra: must be a JSON object"),
        (
            _setting(state="active"),
            400,
            "Cannot patch /state. Only the following can be updated: name, extra",
        ),
    ):
        with pytest.raises(RequestError) as excinfo:
            allocations.update_allocation(svc, record.uuid, LATEST, patch)
        assert refused(status, excinfo) == message
    assert allocations.show_allocation(svc, record.uuid).name == "new"


# -- delete ---------------------------------------------------------------------


def test_deleting_the_allocation_of_a_deployed_node_is_refused(svc: Services) -> None:
    node, record = _backfilled(svc)
    with pytest.raises(RequestError) as excinfo:
        allocations.delete_allocation(svc, record.uuid, actor=ALICE)
    assert "undeploy the node or set it into maintenance mode first" in refused(409, excinfo)
    assert len(_allocations(svc)) == 1
    assert _node(svc, node.id).instance_uuid == record.uuid


def test_deleting_in_maintenance_frees_the_node_fenced(svc: Services) -> None:
    node, record = _backfilled(svc, maintenance=True)
    allocations.delete_allocation(svc, "held", actor=ALICE)
    assert _allocations(svc) == []
    after = _node(svc, node.id)
    assert (after.instance_uuid, after.allocation_id) == (None, None)
    assert after.epoch == node.epoch + 2  # backfilled, then freed
    freed = _history(svc, node.id)[-1]
    assert freed.event == f"allocation {record.uuid} deleted; the node is free"
    assert freed.user == ALICE


def test_deleting_the_allocation_of_a_reserved_node_is_refused_as_locked(svc: Services) -> None:
    node, record = _backfilled(svc, maintenance=True)
    with svc.db.write() as session:
        locked = session.get(Node, node.id)
        assert locked is not None
        locked.reservation = "conductor-1"
    with pytest.raises(NodeLocked):
        allocations.delete_allocation(svc, record.uuid, actor=ALICE)
    assert len(_allocations(svc)) == 1


def test_a_node_side_delete_asks_the_caller_on_the_allocations_owner_first(
    svc: Services,
) -> None:
    node, record = _backfilled(svc, maintenance=True)
    reader = FakeCaller(lambda rule, target: rule != allocations.DELETE)
    with pytest.raises(RequestError) as excinfo:
        allocations.delete_node_allocation(svc, node.uuid, LATEST, caller=reader, actor=ALICE)
    assert refused(403, excinfo) == (
        "Access was denied to the following resource: baremetal:allocation:delete"
    )
    assert reader.asked == [
        (allocations.GET, AllocationTarget(record.owner)),
        (allocations.DELETE, AllocationTarget(record.owner)),
    ]
    assert len(_allocations(svc)) == 1

    blind = FakeCaller(lambda *_: False)
    with pytest.raises(RequestError) as excinfo:
        allocations.delete_node_allocation(svc, node.uuid, LATEST, caller=blind, actor=ALICE)
    assert refused(404, excinfo) == f"Node {node.uuid} is not associated with any allocation."
    assert len(_allocations(svc)) == 1

    allocations.delete_node_allocation(svc, node.uuid, LATEST, caller=ADMIN, actor=ALICE)
    assert _allocations(svc) == []


def test_a_node_without_an_allocation_answers_why(svc: Services) -> None:
    free = _add_node(svc)
    by_hand = _add_node(svc, instance_uuid=str(uuidlib.uuid4()))
    with pytest.raises(RequestError) as excinfo:
        allocations.show_node_allocation(svc, free.uuid, LATEST, caller=ADMIN)
    assert refused(404, excinfo) == f"Node {free.uuid} is not associated with any allocation."
    with pytest.raises(RequestError) as excinfo:
        allocations.show_node_allocation(svc, by_hand.uuid, LATEST, caller=ADMIN)
    assert "does not belong to any allocation" in refused(400, excinfo)


# -- node PATCH -----------------------------------------------------------------


def test_removing_instance_uuid_in_a_patch_deletes_the_allocation(svc: Services) -> None:
    node, _record = _backfilled(svc, maintenance=True)
    changes: dict[str, Any] = {"instance_uuid": None}
    with svc.db.write() as session:
        allocations.release_for_patch(session, _node(svc, node.id), changes)
    assert changes == {"instance_uuid": None, "allocation_id": None}
    assert _allocations(svc) == []


def test_removing_instance_uuid_of_a_deployed_node_is_refused(svc: Services) -> None:
    node, _record = _backfilled(svc)
    changes: dict[str, Any] = {"instance_uuid": None}
    with pytest.raises(RequestError) as excinfo, svc.db.write() as session:
        allocations.release_for_patch(session, _node(svc, node.id), changes)
    assert "it belongs to an allocation" in refused(409, excinfo)
    assert changes == {"instance_uuid": None}
    assert len(_allocations(svc)) == 1
