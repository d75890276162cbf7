"""Provision requests through ``services.provisioning``, without HTTP.

The API's tests drive whole flows with a running conductor; these call
``start`` directly, with no conductor, and read back what its one
transaction left behind: the node's state, the work queued for it and its
history. A refused request must leave all three as they were.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import select

from metalforge import states
from metalforge.conductor.flows import catalog, request_fields
from metalforge.conductor.flows.request_fields import CLEAN_STEPS, SERVICE_STEPS
from metalforge.conductor.flows.spec import FlowRequest
from metalforge.db import flow_progress, queue
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import Conductor, Node, WorkItem, utcnow
from metalforge.errors import NodeLocked, RequestError
from metalforge.services import provisioning
from metalforge.services.context import Services
from tests.services.conftest import add_node, bump_after_find, history_by_user, refused, stored_node

LATEST = (1, 115)
CLEAN_STEP = {"interface": "deploy", "step": "erase_devices_metadata"}


def _add_node(svc: Services, state: str = states.MANAGEABLE, **fields: Any) -> Node:
    return add_node(
        svc, state, **{"target_provision_state": None, "power_state": "power off", **fields}
    )


def _node(svc: Services, node_id: int) -> Node:
    return stored_node(svc, node_id)


def _work(svc: Services) -> list[WorkItem]:
    with svc.db.read() as session:
        return list(session.scalars(select(WorkItem).order_by(WorkItem.id)))


def _queued(svc: Services) -> list[tuple[str, str | None]]:
    """The unfinished items as the operator lists them: (kind, node UUID)."""
    with svc.db.read() as session:
        return [(e.kind, e.node_uuid) for e in queue.entries(session, dead=False)]


def _snapshot(svc: Services, node_id: int) -> tuple[Any, ...]:
    """What a refused request must not change."""
    node = _node(svc, node_id)
    return (
        node.provision_state,
        node.target_provision_state,
        node.epoch,
        node.last_error,
        node.driver_internal_info,
        node.instance_info,
        [(w.kind, w.node_id) for w in _work(svc)],
        history_by_user(svc, node_id),
    )


def _start(svc: Services, node: Node, request: FlowRequest, actor: str | None = "alice") -> str:
    return provisioning.start(svc, node.uuid, LATEST, request, actor)


# -- starting a flow ------------------------------------------------------------


def test_manage_moves_to_verifying_and_queues_one_provision_item(
    svc: Services, wakes: list[str]
) -> None:
    node = _add_node(svc, states.ENROLL)
    returned = _start(svc, node, FlowRequest(states.MANAGE, target="manage"))
    assert returned == node.uuid
    stored = _node(svc, node.id)
    assert (stored.provision_state, stored.target_provision_state) == (
        states.VERIFYING,
        states.MANAGEABLE,
    )
    assert stored.epoch == node.epoch + 1, "a start is fenced: it bumps the epoch"
    assert _queued(svc) == [(queue.PROVISION, node.uuid)]
    (item,) = _work(svc)
    assert (item.node_id, item.state, item.payload) == (node.id, queue.PENDING, {})
    assert item.dedupe_key == queue.provision_key(node.id)
    assert history_by_user(svc, node.id) == [
        ("provisioning", "enroll -> verifying (manage)", "alice")
    ]
    assert wakes == ["notify"]


def test_a_node_may_be_named_by_its_name(svc: Services) -> None:
    node = _add_node(svc, states.ENROLL, name="rack1-n1")
    returned = provisioning.start(svc, "rack1-n1", LATEST, FlowRequest(states.MANAGE), None)
    assert returned == node.uuid
    assert _node(svc, node.id).provision_state == states.VERIFYING


def test_the_work_is_queued_in_the_transaction_that_moves_the_node(
    svc: Services, monkeypatch: pytest.MonkeyPatch, wakes: list[str]
) -> None:
    """Queueing fails after the move was written: the move is rolled back with it."""

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("queue unavailable")

    node = _add_node(svc, states.ENROLL)
    before = _snapshot(svc, node.id)
    monkeypatch.setattr(queue, "enqueue_provision", broken)
    with pytest.raises(RuntimeError, match="queue unavailable"):
        _start(svc, node, FlowRequest(states.MANAGE))
    assert _snapshot(svc, node.id) == before
    assert wakes == []


def test_the_provision_item_prefers_the_nodes_ring_owner(svc: Services) -> None:
    with svc.db.write() as session:
        session.add(
            Conductor(
                hostname="conductor-a",
                conductor_group="",
                drivers=["fake-hardware"],
                online=True,
                # Far ahead: the conductor stays alive however slowly the test runs.
                heartbeat_at=utcnow() + dt.timedelta(hours=1),
            )
        )
    node = _add_node(svc, states.ENROLL)
    _start(svc, node, FlowRequest(states.MANAGE))
    assert [w.preferred_owner for w in _work(svc)] == ["conductor-a"]


def test_a_move_to_a_stable_state_queues_nothing(svc: Services) -> None:
    node = _add_node(svc, states.AVAILABLE)
    _start(svc, node, FlowRequest(states.MANAGE))
    stored = _node(svc, node.id)
    assert (stored.provision_state, stored.target_provision_state) == (states.MANAGEABLE, None)
    assert stored.epoch == node.epoch + 1
    assert _work(svc) == []


def _progress(svc: Services, node_id: int) -> FlowProgress:
    with svc.db.read() as session:
        return flow_progress.load(session.connection(), node_id)


def test_provide_clears_last_error_and_forgets_an_earlier_cleaning(svc: Services) -> None:
    node = _add_node(svc, last_error="the BMC was unreachable", driver_internal_info={"kept": True})
    earlier = FlowProgress(
        flow="clean", plan=({"step": "old"},), step_index=3, ramdisk_prepared=True
    )
    with svc.db.write() as session:
        flow_progress.write(session.connection(), node.id, earlier)
    _start(svc, node, FlowRequest(states.PROVIDE, target="provide"))
    stored = _node(svc, node.id)
    assert (stored.provision_state, stored.target_provision_state) == (
        states.CLEANING,
        states.AVAILABLE,
    )
    assert stored.last_error is None
    assert stored.driver_internal_info == {"kept": True}
    assert _progress(svc, node.id) == FlowProgress(flow="clean")
    assert _queued(svc) == [(queue.PROVISION, node.uuid)]


def test_rescue_keeps_last_error_and_stores_the_password(svc: Services) -> None:
    node = _add_node(
        svc, states.ACTIVE, last_error="an earlier failure", instance_info={"image": "x"}
    )
    request = FlowRequest(
        states.RESCUE_VERB,
        target="rescue",
        given=frozenset({"rescue_password"}),
        rescue_password="s3cret",
    )
    _start(svc, node, request)
    stored = _node(svc, node.id)
    assert (stored.provision_state, stored.target_provision_state) == (
        states.RESCUING,
        states.RESCUE,
    )
    assert stored.last_error == "an earlier failure"
    assert stored.instance_info == {"image": "x", "rescue_password": "s3cret"}
    assert _queued(svc) == [(queue.PROVISION, node.uuid)]


def test_manual_clean_records_the_requested_steps(svc: Services) -> None:
    node = _add_node(svc)
    request = FlowRequest(
        states.CLEAN,
        target="clean",
        given=frozenset({"clean_steps", "disable_ramdisk"}),
        steps={CLEAN_STEPS: (CLEAN_STEP,)},
        disable_ramdisk=True,
    )
    _start(svc, node, request)
    stored = _node(svc, node.id)
    assert (stored.provision_state, stored.target_provision_state) == (
        states.CLEANING,
        states.MANAGEABLE,
    )
    assert stored.driver_internal_info == {}
    assert _progress(svc, node.id) == FlowProgress(
        flow="clean", requested=(CLEAN_STEP,), without_ramdisk=True
    )


def test_manual_clean_with_a_step_the_node_lacks_changes_nothing(svc: Services) -> None:
    node = _add_node(svc)
    before = _snapshot(svc, node.id)
    request = FlowRequest(
        states.CLEAN,
        given=frozenset({"clean_steps"}),
        steps={CLEAN_STEPS: ({"interface": "deploy", "step": "no_such_step"},)},
    )
    with pytest.raises(RequestError) as raised:
        _start(svc, node, request)
    assert "Manual cleaning refused" in refused(400, raised)
    assert "deploy.no_such_step" in raised.value.message
    assert _snapshot(svc, node.id) == before


def test_deploy_stores_the_configdrive_and_queues_the_deployment(svc: Services) -> None:
    node = _add_node(svc, states.AVAILABLE, instance_info={"image_source": "http://i/img"})
    request = FlowRequest(
        states.DEPLOY, target="deploy", given=frozenset({"configdrive"}), configdrive="H4sI"
    )
    _start(svc, node, request)
    stored = _node(svc, node.id)
    assert (stored.provision_state, stored.target_provision_state) == (
        states.DEPLOYING,
        states.ACTIVE,
    )
    assert stored.instance_info == {"image_source": "http://i/img", "configdrive": "H4sI"}
    assert _queued(svc) == [(queue.PROVISION, node.uuid)]


def test_deploy_the_conductor_could_not_plan_changes_nothing(svc: Services) -> None:
    node = _add_node(svc, states.AVAILABLE, instance_info={"traits": ["CUSTOM_GPU"]})
    before = _snapshot(svc, node.id)
    with pytest.raises(RequestError) as raised:
        _start(svc, node, FlowRequest(states.DEPLOY, target="deploy"))
    message = refused(400, raised)
    assert f"Cannot deploy node {node.uuid}" in message
    assert "CUSTOM_GPU" in message
    assert _snapshot(svc, node.id) == before


def test_unhold_continues_the_flow_and_keeps_last_error(svc: Services) -> None:
    node = _add_node(
        svc,
        states.CLEAN_HOLD,
        target_provision_state=states.AVAILABLE,
        last_error="held by a hold step",
    )
    _start(svc, node, FlowRequest(states.UNHOLD, target="unhold"))
    stored = _node(svc, node.id)
    assert (stored.provision_state, stored.target_provision_state) == (
        states.CLEAN_WAIT,
        states.AVAILABLE,
    )
    assert stored.last_error == "held by a hold step"
    assert stored.epoch == node.epoch + 1
    assert _queued(svc) == [(queue.PROVISION, node.uuid)]


_FIELD_NAMED = {field.name: field for field in request_fields.ALL}

# -- fields -----------------------------------------------------------------------


def test_clean_without_clean_steps_is_refused(svc: Services) -> None:
    node = _add_node(svc)
    before = _snapshot(svc, node.id)
    for request in (
        FlowRequest(states.CLEAN, target="clean"),
        FlowRequest(states.CLEAN, target="clean", given=frozenset({"clean_steps"})),
    ):
        with pytest.raises(RequestError) as raised:
            _start(svc, node, request)
        message = refused(400, raised)
        assert '"clean_steps" is required' in message
        assert message == request_fields.CLEAN_STEPS.missing
    assert _snapshot(svc, node.id) == before


@pytest.mark.parametrize(
    ("verb", "field"),
    [
        (states.PROVIDE, "deploy_steps"),
        (states.MANAGE, "clean_steps"),
        (states.DEPLOY, "rescue_password"),
        (states.PROVIDE, "configdrive"),
        (states.DEPLOY, "disable_ramdisk"),
        (states.CLEAN, "service_steps"),
    ],
)
def test_a_field_the_verb_does_not_take_is_refused(svc: Services, verb: str, field: str) -> None:
    node = _add_node(svc)
    before = _snapshot(svc, node.id)
    request = FlowRequest(
        verb, target=verb, given=frozenset({field}), steps={CLEAN_STEPS: (CLEAN_STEP,)}
    )
    with pytest.raises(RequestError) as raised:
        _start(svc, node, request)
    assert refused(400, raised) == _FIELD_NAMED[field].misplaced
    assert _snapshot(svc, node.id) == before


def test_check_fields_accepts_the_fields_the_verb_takes() -> None:
    def check(request: FlowRequest) -> None:
        provisioning.check_fields(request, provisioning.verb_of(request.verb))

    check(FlowRequest(states.DEPLOY, given=frozenset({"deploy_steps", "configdrive"})))
    check(
        FlowRequest(
            states.SERVICE,
            given=frozenset({"service_steps", "disable_ramdisk"}),
            steps={SERVICE_STEPS: ({"interface": "deploy", "step": "x"},)},
        )
    )
    with pytest.raises(RequestError) as raised:
        check(FlowRequest(states.SERVICE, given=frozenset({"service_steps"})))
    assert refused(400, raised) == request_fields.SERVICE_STEPS.missing
    with pytest.raises(RequestError) as raised:
        check(
            FlowRequest(
                states.RESCUE_VERB, given=frozenset({"rescue_password"}), rescue_password=""
            )
        )
    assert "rescue_password" in refused(400, raised)


def test_verb_of_names_the_flow_verbs_and_the_control_verbs() -> None:
    assert provisioning.verb_of(states.DEPLOY) is catalog.VERBS[states.DEPLOY][1]
    assert provisioning.verb_of(states.DEPLOY).fields == {
        request_fields.DEPLOY_STEPS,
        request_fields.CONFIGDRIVE,
    }
    assert provisioning.verb_of(states.CLEAN).requires is request_fields.CLEAN_STEPS
    abort = provisioning.verb_of(states.ABORT)
    unhold = provisioning.verb_of(states.UNHOLD)
    assert (abort.name, abort.since, abort.clears_last_error) == (states.ABORT, (1, 13), False)
    assert (unhold.name, unhold.since, unhold.clears_last_error) == (states.UNHOLD, (1, 85), False)
    assert abort.fields == unhold.fields == frozenset()


# -- refusals -----------------------------------------------------------------------


@pytest.mark.parametrize("verb", [states.PROVIDE, states.ABORT])
def test_a_reserved_node_is_refused_unchanged(svc: Services, wakes: list[str], verb: str) -> None:
    state = states.MANAGEABLE if verb == states.PROVIDE else states.CLEAN_WAIT
    node = _add_node(svc, state, reservation="conductor-1")
    before = _snapshot(svc, node.id)
    with pytest.raises(NodeLocked, match="locked by host conductor-1"):
        _start(svc, node, FlowRequest(verb, target=verb))
    assert _snapshot(svc, node.id) == before
    assert _node(svc, node.id).reservation == "conductor-1"
    assert wakes == []


@pytest.mark.parametrize(
    ("state", "verb"),
    [
        (states.AVAILABLE, states.PROVIDE),
        (states.ENROLL, states.DEPLOY),
        (states.MANAGEABLE, states.UNHOLD),
        (states.ACTIVE, states.ABORT),
        (states.ENROLL, states.CLEAN),
    ],
)
def test_a_verb_the_state_table_does_not_allow_changes_nothing(
    svc: Services, wakes: list[str], state: str, verb: str
) -> None:
    node = _add_node(svc, state)
    before = _snapshot(svc, node.id)
    request = FlowRequest(verb, target=verb, given=frozenset(), steps={CLEAN_STEPS: (CLEAN_STEP,)})
    with pytest.raises(RequestError) as raised:
        _start(svc, node, request)
    assert refused(400, raised) == (
        f'The requested action "{verb}" can not be performed on node "{node.uuid}" '
        f'while it is in state "{state}".'
    )
    assert _snapshot(svc, node.id) == before
    assert wakes == []


def test_deploy_of_a_node_in_maintenance_is_refused(svc: Services) -> None:
    node = _add_node(svc, states.AVAILABLE, maintenance=True, maintenance_reason="disk swap")
    before = _snapshot(svc, node.id)
    with pytest.raises(RequestError) as raised:
        _start(svc, node, FlowRequest(states.DEPLOY, target="deploy"))
    assert "while it is in maintenance mode" in refused(400, raised)
    assert _snapshot(svc, node.id) == before


@pytest.mark.parametrize("verb", [states.REBUILD, states.UNDEPLOY])
def test_a_protected_node_is_not_rebuilt_or_undeployed(svc: Services, verb: str) -> None:
    node = _add_node(svc, states.ACTIVE, protected=True, protected_reason="prod database")
    before = _snapshot(svc, node.id)
    with pytest.raises(RequestError) as raised:
        _start(svc, node, FlowRequest(verb, target=verb))
    assert f"Node {node.uuid} is protected" in refused(403, raised)
    assert _snapshot(svc, node.id) == before


def test_undeploy_keeps_last_error(svc: Services) -> None:
    node = _add_node(svc, states.ACTIVE, last_error="an earlier failure")
    _start(svc, node, FlowRequest(states.UNDEPLOY, target="undeploy"))
    stored = _node(svc, node.id)
    assert (stored.provision_state, stored.target_provision_state) == (
        states.DELETING,
        states.AVAILABLE,
    )
    assert stored.last_error == "an earlier failure"


def test_a_node_changed_since_it_was_read_is_not_moved(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conductor bumps the epoch just after the request read the node: 409, not a move."""
    node = _add_node(svc, states.ENROLL)
    bump_after_find(monkeypatch, "load_node")
    with pytest.raises(RequestError) as raised:
        _start(svc, node, FlowRequest(states.MANAGE))
    assert not isinstance(raised.value, NodeLocked)
    assert "changed while the request was processed" in refused(409, raised)
    stored = _node(svc, node.id)
    assert (stored.provision_state, stored.epoch) == (states.ENROLL, node.epoch)
    assert _work(svc) == []
    assert history_by_user(svc, node.id) == []


# -- abort ------------------------------------------------------------------------


def test_abort_queues_an_abort_item_and_records_who_asked(svc: Services, wakes: list[str]) -> None:
    node = _add_node(svc, states.CLEAN_WAIT, target_provision_state=states.AVAILABLE)
    _start(svc, node, FlowRequest(states.ABORT, target="abort"), actor="bob")
    assert _queued(svc) == [(states.ABORT, node.uuid)]
    (item,) = _work(svc)
    assert (item.kind, item.node_id, item.payload, item.dedupe_key) == ("abort", node.id, {}, None)
    stored = _node(svc, node.id)
    assert stored.provision_state == states.CLEAN_WAIT, "the conductor carries the abort out"
    assert history_by_user(svc, node.id) == [("provisioning", "abort requested", "bob")]
    assert wakes == ["notify"]


def test_abort_in_deploy_wait_needs_a_later_version(svc: Services) -> None:
    node = _add_node(svc, states.DEPLOY_WAIT, target_provision_state=states.ACTIVE)
    needed = catalog.ABORT_SINCE[states.DEPLOY_WAIT]
    older = (needed[0], needed[1] - 1)
    with pytest.raises(RequestError) as raised:
        provisioning.start(svc, node.uuid, older, FlowRequest(states.ABORT), "bob")
    assert "needs API version 1.110 or newer" in refused(400, raised)
    assert _work(svc) == []
    assert history_by_user(svc, node.id) == []
    provisioning.start(svc, node.uuid, needed, FlowRequest(states.ABORT), "bob")
    assert _queued(svc) == [(states.ABORT, node.uuid)]


# -- a node whose interfaces its driver no longer offers ------------------------------


def test_deploy_of_a_node_with_an_interface_its_driver_lacks_is_400(svc: Services) -> None:
    node = _add_node(svc, states.AVAILABLE, raid_interface="hw-raid-9000")
    before = _snapshot(svc, node.id)
    with pytest.raises(RequestError) as raised:
        _start(svc, node, FlowRequest(states.DEPLOY, target="deploy"))
    assert "hw-raid-9000" in refused(400, raised)
    assert _snapshot(svc, node.id) == before


def test_manual_clean_of_a_node_with_an_interface_its_driver_lacks_is_400(
    svc: Services,
) -> None:
    node = _add_node(svc, raid_interface="hw-raid-9000")
    before = _snapshot(svc, node.id)
    request = FlowRequest(
        states.CLEAN,
        target="clean",
        given=frozenset({"clean_steps"}),
        steps={CLEAN_STEPS: (CLEAN_STEP,)},
    )
    with pytest.raises(RequestError) as raised:
        _start(svc, node, request)
    assert "hw-raid-9000" in refused(400, raised)
    assert _snapshot(svc, node.id) == before
