"""Maintenance mode through ``services.maintenance``, without HTTP.

Turning maintenance on or off is a fenced node write: the tests read back
the flag, the reason and the fault, the epoch and the history entry naming
who asked, and that a node a conductor holds is refused unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from metalforge import states
from metalforge.db.models import Node, NodeHistory
from metalforge.errors import NodeLocked, RequestError
from metalforge.services import maintenance
from metalforge.services.context import Services
from tests.services.conftest import add_node, bump_after_find

LATEST = (1, 115)


def _add_node(svc: Services, **fields: Any) -> Node:
    return add_node(svc, states.ACTIVE, **{"name": "rack1-n1", **fields})


def _state(svc: Services, node_id: int) -> tuple[bool, str | None, str | None, int]:
    """(maintenance, maintenance_reason, fault, epoch) as stored."""
    with svc.db.read() as session:
        node = session.get(Node, node_id)
        assert node is not None
        return node.maintenance, node.maintenance_reason, node.fault, node.epoch


def _history(svc: Services, node_id: int) -> list[tuple[str, str, str | None, str | None]]:
    with svc.db.read() as session:
        rows = session.scalars(
            select(NodeHistory).where(NodeHistory.node_id == node_id).order_by(NodeHistory.id)
        )
        return [(h.event_type, h.event, h.user, h.state) for h in rows]


def test_on_with_a_reason_is_stored_fenced_and_recorded(svc: Services) -> None:
    node = _add_node(svc)
    maintenance.set_maintenance(svc, node.uuid, LATEST, on=True, reason="disk swap", actor="alice")
    assert _state(svc, node.id) == (True, "disk swap", None, node.epoch + 1)
    assert _history(svc, node.id) == [
        ("maintenance", "maintenance on: disk swap", "alice", states.ACTIVE)
    ]


def test_on_again_replaces_the_reason_and_keeps_the_fault(svc: Services) -> None:
    node = _add_node(svc, maintenance=True, maintenance_reason="old", fault="power failure")
    maintenance.set_maintenance(svc, "rack1-n1", LATEST, on=True, reason="new", actor=None)
    assert _state(svc, node.id) == (True, "new", "power failure", node.epoch + 1)


def test_off_clears_the_reason_and_the_fault(svc: Services) -> None:
    node = _add_node(
        svc, maintenance=True, maintenance_reason="BMC unreachable", fault="power failure"
    )
    maintenance.set_maintenance(svc, node.uuid, LATEST, on=False, reason="ignored", actor="bob")
    assert _state(svc, node.id) == (False, None, None, node.epoch + 1)
    assert _history(svc, node.id) == [("maintenance", "maintenance off", "bob", states.ACTIVE)]


def test_a_node_a_conductor_holds_is_refused_unchanged(svc: Services) -> None:
    node = _add_node(
        svc,
        reservation="conductor-1",
        maintenance=True,
        maintenance_reason="BMC unreachable",
        fault="power failure",
    )
    for on in (True, False):
        with pytest.raises(NodeLocked, match="locked by host conductor-1"):
            maintenance.set_maintenance(svc, node.uuid, LATEST, on=on, reason="x", actor="alice")
    assert _state(svc, node.id) == (True, "BMC unreachable", "power failure", node.epoch)
    assert _history(svc, node.id) == []


def test_an_unknown_node_is_404(svc: Services) -> None:
    _add_node(svc)
    with pytest.raises(RequestError) as refused:
        maintenance.set_maintenance(svc, "rack9-n9", LATEST, on=True, reason=None, actor=None)
    assert (refused.value.status, refused.value.message) == (
        404,
        "Node rack9-n9 could not be found.",
    )


def test_a_node_changed_since_it_was_read_is_not_written_over(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _add_node(svc)
    bump_after_find(monkeypatch)
    with pytest.raises(RequestError) as refused:
        maintenance.set_maintenance(svc, node.uuid, LATEST, on=True, reason="x", actor=None)
    assert refused.value.status == 409
    assert not isinstance(refused.value, NodeLocked)
    assert _state(svc, node.id) == (False, None, None, node.epoch)
    assert _history(svc, node.id) == []
