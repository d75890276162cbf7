"""What the service tests share: services on a fresh database of each engine, nodes."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from metalforge import states
from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db.engine import Database
from metalforge.db.models import Node, NodeHistory, NodeTrait
from metalforge.errors import RequestError
from metalforge.services import lookup
from metalforge.services.caller import Caller, Target
from metalforge.services.context import Services
from metalforge.startup import build_registry
from tests.support.stack import test_settings


def _anything(rule: str, target: Target) -> bool:
    return True


@dataclass
class FakeCaller(Caller):
    """A caller whose every question ``allow`` answers (by default: yes), each one kept."""

    allow: Callable[[str, Target], bool] = _anything
    asked: list[tuple[str, Target]] = field(default_factory=list)

    def may(self, rule: str, target: Target) -> bool:
        self.asked.append((rule, target))
        return self.allow(rule, target)


def services_on(db: Database, db_url: str, wakes: list[str], **settings: Any) -> Services:
    """Services with no conductor running; ``wakes`` gets an entry per wake-up."""
    configured = test_settings(db_url, **settings)
    return Services(
        settings=configured,
        db=db,
        drivers=build_registry(configured),
        directory=ConductorDirectory(db, configured.conductor.heartbeat_timeout),
        notify=lambda: wakes.append("notify"),
    )


@pytest.fixture
def wakes() -> list[str]:
    """One entry each time a service woke the conductors."""
    return []


@pytest.fixture
def svc(db: Database, db_url: str, wakes: list[str]) -> Services:
    return services_on(db, db_url, wakes)


def add_node(
    svc: Services,
    state: str = states.MANAGEABLE,
    traits: tuple[str, ...] = (),
    **fields: Any,
) -> Node:
    """A fake-hardware node written straight to the database (``fields`` override)."""
    values: dict[str, Any] = {
        "uuid": str(uuidlib.uuid4()),
        "driver": "fake-hardware",
        "provision_state": state,
        **fields,
    }
    with svc.db.write() as session:
        node = Node(**values)
        session.add(node)
        session.flush()
        session.add_all(NodeTrait(node_id=node.id, trait=t) for t in traits)
    return node


def stored_node(svc: Services, node_id: int) -> Node:
    """The node as the database has it now."""
    with svc.db.read() as session:
        node = session.get(Node, node_id)
        assert node is not None
        return node


def refused(status: int, excinfo: pytest.ExceptionInfo[RequestError]) -> str:
    """The refusal's message, once its status is the one expected."""
    assert excinfo.value.status == status, excinfo.value.message
    return excinfo.value.message


def history_by_user(svc: Services, node_id: int) -> list[tuple[str, str, str | None]]:
    """The node's history as (event type, event, user), oldest first."""
    with svc.db.read() as session:
        rows = session.scalars(
            select(NodeHistory).where(NodeHistory.node_id == node_id).order_by(NodeHistory.id)
        )
        return [(h.event_type, h.event, h.user) for h in rows]


def bump_after_find(monkeypatch: pytest.MonkeyPatch, finder: str = "find_node") -> None:
    """Another writer changes the node right after a service reads it (a lost race).

    ``finder`` is the ``services.lookup`` function the service reads the node with.
    """
    real = getattr(lookup, finder)

    def find_then_bump(session: Session, *args: Any, **kwargs: Any) -> Node:
        found: Node = real(session, *args, **kwargs)
        session.execute(
            update(Node)
            .where(Node.id == found.id)
            .values(epoch=Node.epoch + 1)
            .execution_options(synchronize_session=False)
        )
        return found

    monkeypatch.setattr(lookup, finder, find_then_bump)
