"""Power requests through ``services.power``, without HTTP.

No conductor runs: each test reads back what ``request_power`` left in the
database, the node's ``target_power_state``, the queued ``power`` item and
the node's history, and that a refused request left none of them.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from metalforge import states
from metalforge.conductor.flows import catalog
from metalforge.db import queue
from metalforge.db.models import Node, WorkItem
from metalforge.drivers.base import POWER_OFF, POWER_ON, REBOOT, SOFT_POWER_OFF, SOFT_REBOOT
from metalforge.errors import NodeLocked, RequestError
from metalforge.services import power
from metalforge.services.context import Services
from tests.services.conftest import add_node, bump_after_find, history_by_user, refused, stored_node

LATEST = (1, 115)
CLEAN_STATES = (states.CLEANING, states.CLEAN_WAIT)
"""The power-blocked states of the clean flow."""


def _add_node(svc: Services, state: str = states.AVAILABLE, **fields: Any) -> Node:
    return add_node(
        svc,
        state,
        **{
            "name": "rack1-n1",
            "target_provision_state": states.STATES[state].goal,
            "power_state": POWER_OFF,
            **fields,
        },
    )


def _node(svc: Services, node_id: int) -> Node:
    return stored_node(svc, node_id)


def _work(svc: Services) -> list[tuple[str, int | None, dict[str, Any]]]:
    with svc.db.read() as session:
        return [
            (w.kind, w.node_id, w.payload)
            for w in session.scalars(select(WorkItem).order_by(WorkItem.id))
        ]


def _unchanged(svc: Services, node: Node) -> None:
    """Nothing a refused request could have written is there."""
    stored = _node(svc, node.id)
    assert (stored.target_power_state, stored.power_state) == (None, POWER_OFF)
    assert stored.epoch == node.epoch
    assert _work(svc) == []
    assert history_by_user(svc, node.id) == []


def test_a_request_sets_the_target_and_queues_the_change(svc: Services, wakes: list[str]) -> None:
    node = _add_node(svc)
    returned = power.request_power(svc, node.uuid, LATEST, POWER_ON, None, "alice")
    assert returned == node.uuid
    stored = _node(svc, node.id)
    assert stored.target_power_state == POWER_ON
    assert stored.power_state == POWER_OFF, "only the conductor changes the power itself"
    assert stored.epoch == node.epoch + 1
    assert _work(svc) == [("power", node.id, {"target": POWER_ON, "timeout": None})]
    with svc.db.read() as session:
        assert [(e.kind, e.node_uuid) for e in queue.entries(session, dead=False)] == [
            ("power", node.uuid)
        ]
    assert history_by_user(svc, node.id) == [("power", f"power {POWER_ON} requested", "alice")]
    assert wakes == ["notify"]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (POWER_ON, POWER_ON),
        (REBOOT, POWER_ON),
        (SOFT_REBOOT, POWER_ON),
        (POWER_OFF, POWER_OFF),
        (SOFT_POWER_OFF, POWER_OFF),
    ],
)
def test_the_target_is_the_state_the_node_ends_in(
    svc: Services, target: str, expected: str
) -> None:
    node = _add_node(svc)
    power.request_power(svc, "rack1-n1", LATEST, target, 30, None)
    assert _node(svc, node.id).target_power_state == expected
    assert _work(svc) == [("power", node.id, {"target": target, "timeout": 30})]


def test_a_second_request_while_one_is_pending_is_409(svc: Services) -> None:
    node = _add_node(svc)
    power.request_power(svc, node.uuid, LATEST, POWER_ON, None, "alice")
    with pytest.raises(RequestError) as raised:
        power.request_power(svc, node.uuid, LATEST, POWER_OFF, None, "bob")
    assert not isinstance(raised.value, NodeLocked)
    assert f"already has a power change to {POWER_ON} in progress" in refused(409, raised)
    stored = _node(svc, node.id)
    assert (stored.target_power_state, stored.epoch) == (POWER_ON, node.epoch + 1)
    assert _work(svc) == [("power", node.id, {"target": POWER_ON, "timeout": None})]
    assert [user for _, _, user in history_by_user(svc, node.id)] == ["alice"]


@pytest.mark.parametrize("state", sorted(catalog.POWER_BLOCKED_STATES))
def test_a_state_whose_flow_drives_the_power_refuses_requests(
    svc: Services, wakes: list[str], state: str
) -> None:
    node = _add_node(svc, state)
    with pytest.raises(RequestError) as raised:
        power.request_power(svc, node.uuid, LATEST, POWER_ON, None, "alice")
    assert refused(400, raised) == (
        f'Power state change is not allowed while node {node.uuid} is in state "{state}"'
    )
    _unchanged(svc, node)
    assert wakes == []


@pytest.mark.parametrize(
    "state",
    [
        states.ENROLL,
        states.MANAGEABLE,
        states.ACTIVE,
        states.CLEAN_HOLD,
        states.DEPLOY_WAIT,
        states.RESCUE_WAIT,
        states.CLEAN_FAILED,
        states.ERROR,
    ],
)
def test_other_states_accept_requests(svc: Services, state: str) -> None:
    assert state not in catalog.POWER_BLOCKED_STATES
    node = _add_node(svc, state)
    power.request_power(svc, node.uuid, LATEST, REBOOT, None, None)
    assert _node(svc, node.id).target_power_state == POWER_ON
    assert [kind for kind, _, _ in _work(svc)] == ["power"]


@pytest.mark.parametrize("state", CLEAN_STATES)
def test_cleaning_refuses_with_400_even_while_a_conductor_holds_the_node(
    svc: Services, state: str
) -> None:
    """Ironic answers a node busy cleaning at once, before it looks at the lock."""
    assert state in catalog.POWER_BLOCKED_STATES
    node = _add_node(svc, state, reservation="conductor-1")
    with pytest.raises(RequestError) as raised:
        power.request_power(svc, node.uuid, LATEST, POWER_ON, None, None)
    assert not isinstance(raised.value, NodeLocked)
    assert "Power state change is not allowed" in refused(400, raised)
    _unchanged(svc, node)


@pytest.mark.parametrize("state", [states.DEPLOYING, states.VERIFYING, states.AVAILABLE])
def test_elsewhere_a_held_node_answers_node_locked(svc: Services, state: str) -> None:
    assert state not in CLEAN_STATES
    node = _add_node(svc, state, reservation="conductor-1")
    with pytest.raises(NodeLocked, match="locked by host conductor-1"):
        power.request_power(svc, node.uuid, LATEST, POWER_ON, None, None)
    _unchanged(svc, node)
    assert _node(svc, node.id).reservation == "conductor-1"


@pytest.mark.parametrize("target", [POWER_OFF, SOFT_POWER_OFF])
def test_disable_power_off_refuses_powering_off(svc: Services, target: str) -> None:
    node = _add_node(svc, disable_power_off=True)
    with pytest.raises(RequestError) as raised:
        power.request_power(svc, node.uuid, LATEST, target, None, None)
    assert "is disabled (disable_power_off)" in refused(400, raised)
    _unchanged(svc, node)


def test_disable_power_off_still_allows_power_on(svc: Services) -> None:
    node = _add_node(svc, disable_power_off=True)
    power.request_power(svc, node.uuid, LATEST, POWER_ON, None, None)
    assert _node(svc, node.id).target_power_state == POWER_ON
    assert len(_work(svc)) == 1


def test_an_unknown_node_is_404(svc: Services) -> None:
    _add_node(svc)
    with pytest.raises(RequestError) as raised:
        power.request_power(svc, "rack9-n9", LATEST, POWER_ON, None, None)
    assert refused(404, raised) == "Node rack9-n9 could not be found."
    assert _work(svc) == []


def test_a_node_changed_since_it_was_read_is_not_written_over(
    svc: Services, monkeypatch: pytest.MonkeyPatch, wakes: list[str]
) -> None:
    node = _add_node(svc)
    bump_after_find(monkeypatch)
    with pytest.raises(RequestError) as raised:
        power.request_power(svc, node.uuid, LATEST, POWER_ON, None, None)
    assert "changed while the request was processed" in refused(409, raised)
    _unchanged(svc, node)
    assert wakes == []
