"""Node traits through the service functions, without HTTP.

The API's tests cover the routes' shape (versions, bodies, 204s); these call
``services.traits`` directly and check what the routes cannot show: every
change is fenced (a held node is refused, a node changed since it was read
is not written over, the epoch is bumped) and history names who asked.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import select, update

from metalforge import states
from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db.engine import Database
from metalforge.db.models import Node, NodeHistory, NodeTrait
from metalforge.errors import NodeLocked, RequestError
from metalforge.services import traits
from metalforge.services.context import Services
from metalforge.startup import build_registry
from tests.services.conftest import bump_after_find
from tests.support.stack import test_settings

NODE = "00000000-0000-0000-0000-0000000000a1"
LATEST = (1, 101)


@pytest.fixture
def svc(db: Database, db_url: str) -> Services:
    settings = test_settings(db_url)
    directory = ConductorDirectory(db, settings.conductor.heartbeat_timeout)
    with db.write() as session:
        session.add(
            Node(uuid=NODE, name="rack1-n1", driver="fake-hardware", provision_state=states.ENROLL)
        )
    return Services(settings=settings, db=db, drivers=build_registry(settings), directory=directory)


def _node(svc: Services) -> Node:
    with svc.db.read() as session:
        return session.scalars(select(Node).where(Node.uuid == NODE)).one()


def _traits(svc: Services) -> list[str]:
    with svc.db.read() as session:
        return sorted(session.scalars(select(NodeTrait.trait)))


def _history(svc: Services) -> list[NodeHistory]:
    with svc.db.read() as session:
        return list(session.scalars(select(NodeHistory).order_by(NodeHistory.id)))


def _reserve(svc: Services, holder: str | None) -> None:
    with svc.db.write() as session:
        session.execute(update(Node).where(Node.uuid == NODE).values(reservation=holder))


@pytest.fixture
def bumped_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Someone (a conductor taking the node) bumps the epoch just after the service read it."""
    bump_after_find(monkeypatch)


def test_set_replaces_the_traits_bumps_the_epoch_and_names_the_actor(svc: Services) -> None:
    before = _node(svc).epoch
    traits.set_traits(svc, NODE, LATEST, ["CUSTOM_B", "CUSTOM_A", "CUSTOM_B"], actor="alice")
    traits.set_traits(svc, "rack1-n1", LATEST, ["CUSTOM_C"], actor="bob")
    assert _traits(svc) == ["CUSTOM_C"]
    assert _node(svc).epoch == before + 2
    entries = [(h.event_type, h.event, h.user) for h in _history(svc)]
    assert entries == [
        ("traits", "traits set to CUSTOM_A, CUSTOM_B", "alice"),
        ("traits", "traits set to CUSTOM_C", "bob"),
    ]


def test_add_then_remove_one_trait(svc: Services) -> None:
    traits.add_trait(svc, NODE, LATEST, "CUSTOM_GOLD", actor="alice")
    assert traits.list_traits(svc, NODE, LATEST) == ["CUSTOM_GOLD"]
    traits.remove_trait(svc, NODE, LATEST, "CUSTOM_GOLD", actor="carol")
    assert _traits(svc) == []
    assert [(h.event, h.user) for h in _history(svc)] == [
        ("trait CUSTOM_GOLD added", "alice"),
        ("trait CUSTOM_GOLD removed", "carol"),
    ]
    assert _node(svc).epoch == 2


def test_adding_a_trait_the_node_has_writes_nothing(svc: Services) -> None:
    traits.add_trait(svc, NODE, LATEST, "CUSTOM_GOLD", actor="alice")
    epoch = _node(svc).epoch
    traits.add_trait(svc, NODE, LATEST, "CUSTOM_GOLD", actor="alice")
    assert _node(svc).epoch == epoch
    assert len(_history(svc)) == 1


def test_a_node_has_at_most_fifty_traits(svc: Services) -> None:
    fifty = [f"CUSTOM_T{i}" for i in range(traits.MAX_TRAITS)]
    traits.set_traits(svc, NODE, LATEST, fifty, actor=None)
    with pytest.raises(RequestError) as refused:
        traits.add_trait(svc, NODE, LATEST, "CUSTOM_ONE_MORE", actor=None)
    assert refused.value.status == 400
    assert "at most 50 traits" in refused.value.message
    assert len(_traits(svc)) == traits.MAX_TRAITS


def test_removing_a_trait_the_node_lacks_is_404(svc: Services) -> None:
    with pytest.raises(RequestError) as refused:
        traits.remove_trait(svc, NODE, LATEST, "CUSTOM_MISSING", actor=None)
    assert (refused.value.status, refused.value.message) == (
        404,
        f"Node {NODE} doesn't have a trait 'CUSTOM_MISSING'",
    )
    assert _history(svc) == []


def test_removing_every_trait_is_fenced_and_recorded(svc: Services) -> None:
    traits.set_traits(svc, NODE, LATEST, ["CUSTOM_A", "CUSTOM_B"], actor="alice")
    traits.remove_traits(svc, NODE, LATEST, actor="dave")
    assert _traits(svc) == []
    assert _node(svc).epoch == 2
    assert (_history(svc)[-1].event, _history(svc)[-1].user) == ("all traits removed", "dave")


@pytest.mark.parametrize(
    "change",
    [
        lambda svc: traits.set_traits(svc, NODE, LATEST, ["CUSTOM_X"], actor="alice"),
        lambda svc: traits.add_trait(svc, NODE, LATEST, "CUSTOM_X", actor="alice"),
        lambda svc: traits.remove_trait(svc, NODE, LATEST, "CUSTOM_KEEP", actor="alice"),
        lambda svc: traits.remove_traits(svc, NODE, LATEST, actor="alice"),
    ],
    ids=["set", "add", "remove", "remove-all"],
)
def test_a_node_a_conductor_holds_is_refused_unchanged(
    svc: Services, change: Callable[[Services], None]
) -> None:
    traits.add_trait(svc, NODE, LATEST, "CUSTOM_KEEP", actor=None)
    _reserve(svc, "conductor-1")
    with pytest.raises(NodeLocked, match="locked by host conductor-1"):
        change(svc)
    assert _traits(svc) == ["CUSTOM_KEEP"]
    assert _node(svc).epoch == 1
    assert len(_history(svc)) == 1


@pytest.mark.usefixtures("bumped_meanwhile")
def test_a_node_changed_since_it_was_read_is_not_written_over(svc: Services) -> None:
    with pytest.raises(RequestError) as refused:
        traits.set_traits(svc, NODE, LATEST, ["CUSTOM_X"], actor="alice")
    assert not isinstance(refused.value, NodeLocked)
    assert refused.value.status == 409
    assert "changed while it was being updated" in refused.value.message
    assert _traits(svc) == []
    assert _node(svc).epoch == 0
    assert _history(svc) == []
