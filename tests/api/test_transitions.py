"""Every API verb in every provision state, generated from the state table.

For each (state, verb) pair a fresh node is put straight into the state
through the database and the verb is sent through the API. The table says
what must happen: an allowed verb answers 202 and moves the node where
``states.resolve`` says (``abort`` only queues work for the conductor); a
refused one answers Ironic's 400 and changes nothing. No conductor runs, so
nothing moves the node afterwards and the state the API left is the state
observed. SQLite only: the compare-and-set itself is covered on both engines
by the lifecycle tests; here the point is the table's coverage.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import func, select, update

from metalforge import states
from metalforge.db.models import Node, WorkItem
from tests.support.api import create_node, error_text, version
from tests.support.stack import Stack, start_stack
from tests.support.stack import test_settings as settings_for

STEPS = [{"interface": "deploy", "step": "erase_devices_metadata"}]

BODIES: dict[str, dict[str, Any]] = {
    states.CLEAN: {"clean_steps": STEPS},
    states.SERVICE: {"service_steps": [{"interface": "raid", "step": "delete_configuration"}]},
    states.RESCUE_VERB: {"rescue_password": "s3cret"},
}
"""What each verb needs in its body besides ``target`` to pass the body checks."""

PAIRS = [(state, verb) for state in states.STATES for verb in states.VERBS]


@pytest.fixture(scope="module")
def quiet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """API without a running conductor: a node stays in whatever state the API left it.

    Shared by the module's cases; each case works on a node of its own, so the
    cases cannot see each other.
    """
    path = tmp_path_factory.mktemp("transitions") / "metalforge.sqlite"
    settings = settings_for(f"sqlite:///{path}")
    # Nothing will release a reserved node here: answer 409 without the usual wait.
    api = settings.api.model_copy(update={"lock_wait_seconds": 0.1})
    running = start_stack(settings.model_copy(update={"api": api}), start_conductor=False)
    try:
        yield running
    finally:
        running.stop()


@dataclass(frozen=True)
class Snapshot:
    """What a provision request may change, read from the database."""

    provision_state: str
    target_provision_state: str | None
    epoch: int
    work: tuple[str, ...]
    """Kinds of the node's work items, oldest first."""


def _snapshot(stack: Stack, node_uuid: str) -> Snapshot:
    with stack.db.read() as session:
        node = session.scalars(select(Node).where(Node.uuid == node_uuid)).one()
        kinds = session.scalars(
            select(WorkItem.kind).where(WorkItem.node_id == node.id).order_by(WorkItem.id)
        ).all()
        return Snapshot(node.provision_state, node.target_provision_state, node.epoch, tuple(kinds))


def _node_in(stack: Stack, state: str, goal: str | None = None) -> str:
    """A new node placed directly in ``state``, unreserved, with the state's goal as target."""
    node_uuid: str = create_node(stack.client, name=f"n-{uuidlib.uuid4().hex[:12]}")["uuid"]
    target = None if states.STATES[state].stable else (goal or states.STATES[state].goal)
    with stack.db.write() as session:
        session.execute(
            update(Node)
            .where(Node.uuid == node_uuid)
            .values(provision_state=state, target_provision_state=target, reservation=None)
        )
    return node_uuid


def _send(
    stack: Stack, node_uuid: str, target: str, api_version: str = "latest", **extra: Any
) -> Any:
    verb = states.VERB_ALIASES.get(target, target)
    body = {"target": target, **BODIES.get(verb, {}), **extra}
    return stack.client.put(
        f"/v1/nodes/{node_uuid}/states/provision", json=body, headers=version(api_version)
    )


def _refused_message(node_uuid: str, target: str, state: str) -> str:
    return (
        f'The requested action "{target}" can not be performed on node '
        f'"{node_uuid}" while it is in state "{state}".'
    )


@pytest.mark.parametrize(("state", "verb"), PAIRS, ids=[f"{s}-{v}" for s, v in PAIRS])
def test_verb_in_state(quiet_stack: Stack, state: str, verb: str) -> None:
    node_uuid = _node_in(quiet_stack, state)
    before = _snapshot(quiet_stack, node_uuid)

    response = _send(quiet_stack, node_uuid, verb)

    after = _snapshot(quiet_stack, node_uuid)
    if verb not in states.allowed_events(state):
        assert response.status_code == 400, response.text
        assert error_text(response) == _refused_message(node_uuid, verb, state)
        assert after == before
        return
    assert response.status_code == 202, response.text
    assert response.headers["Location"].endswith(f"/v1/nodes/{node_uuid}/states")
    if verb == states.ABORT:
        # The conductor decides how to abort (a running step may finish first).
        assert after.work == (*before.work, "abort")
        assert after.provision_state == before.provision_state
        assert after.target_provision_state == before.target_provision_state
        assert after.epoch == before.epoch
        return
    expected = states.resolve(states.find(state, verb), before.target_provision_state)
    assert (after.provision_state, after.target_provision_state) == expected
    assert after.epoch == before.epoch + 1
    queued = ("provision",) if states.STATES[expected[0]].busy else ()
    assert after.work == (*before.work, *queued)


def test_every_pair_is_generated() -> None:
    """The parametrisation is the table's full product: a new state or verb is covered at once."""
    assert len(PAIRS) == len(states.STATES) * len(states.VERBS)
    allowed = [p for p in PAIRS if p[1] in states.allowed_events(p[0])]
    assert len(allowed) == sum(1 for t in states.TRANSITIONS if t.event in states.VERBS)


@pytest.mark.parametrize(
    ("state", "alias"),
    [
        (states.AVAILABLE, "deploy"),
        (states.DEPLOY_FAILED, "deploy"),
        (states.ACTIVE, "undeploy"),
        (states.ERROR, "undeploy"),
        (states.MANAGEABLE, "deploy"),
        (states.ENROLL, "undeploy"),
    ],
)
def test_aliases_follow_their_verb(quiet_stack: Stack, state: str, alias: str) -> None:
    """``deploy`` and ``undeploy`` act as ``active`` and ``deleted``; a refusal names the alias."""
    node_uuid = _node_in(quiet_stack, state)
    before = _snapshot(quiet_stack, node_uuid)
    response = _send(quiet_stack, node_uuid, alias)
    after = _snapshot(quiet_stack, node_uuid)
    verb = states.VERB_ALIASES[alias]
    if verb in states.allowed_events(state):
        assert response.status_code == 202, response.text
        expected = states.resolve(states.find(state, verb), before.target_provision_state)
        assert (after.provision_state, after.target_provision_state) == expected
    else:
        assert response.status_code == 400, response.text
        assert error_text(response) == _refused_message(node_uuid, alias, state)
        assert after == before


@pytest.mark.parametrize(
    ("state", "too_old", "enough"),
    [(states.INSPECT_WAIT, "1.40", "1.41"), (states.DEPLOY_WAIT, "1.109", "1.110")],
)
def test_abort_in_some_states_needs_a_newer_version(
    quiet_stack: Stack, state: str, too_old: str, enough: str
) -> None:
    node_uuid = _node_in(quiet_stack, state)
    before = _snapshot(quiet_stack, node_uuid)
    response = _send(quiet_stack, node_uuid, states.ABORT, api_version=too_old)
    assert response.status_code == 400, response.text
    assert enough in error_text(response)
    assert _snapshot(quiet_stack, node_uuid) == before
    assert _send(quiet_stack, node_uuid, states.ABORT, api_version=enough).status_code == 202
    assert _snapshot(quiet_stack, node_uuid).work == (*before.work, "abort")


def test_unhold_keeps_the_goal_of_a_manual_clean(quiet_stack: Stack) -> None:
    """A held manual clean still ends in manageable, not in available."""
    node_uuid = _node_in(quiet_stack, states.CLEAN_HOLD, goal=states.MANAGEABLE)
    assert _send(quiet_stack, node_uuid, states.UNHOLD).status_code == 202
    after = _snapshot(quiet_stack, node_uuid)
    assert (after.provision_state, after.target_provision_state) == (
        states.CLEAN_WAIT,
        states.MANAGEABLE,
    )


@pytest.mark.parametrize("state", [states.DEPLOY_WAIT, states.RESCUE_WAIT, states.SERVICE_WAIT])
def test_undeploy_while_waiting_heads_for_available(quiet_stack: Stack, state: str) -> None:
    """Undeploying abandons the waiting flow: the target is the new flow's, not the old one's."""
    node_uuid = _node_in(quiet_stack, state)
    assert _send(quiet_stack, node_uuid, states.UNDEPLOY).status_code == 202
    after = _snapshot(quiet_stack, node_uuid)
    assert (after.provision_state, after.target_provision_state) == (
        states.DELETING,
        states.AVAILABLE,
    )


def test_reserved_node_is_409_and_unchanged(quiet_stack: Stack) -> None:
    """A node a conductor holds refuses even an allowed verb, with 409 (clients retry it)."""
    node_uuid = _node_in(quiet_stack, states.MANAGEABLE)
    with quiet_stack.db.write() as session:
        session.execute(
            update(Node).where(Node.uuid == node_uuid).values(reservation="another-conductor")
        )
    before = _snapshot(quiet_stack, node_uuid)
    response = _send(quiet_stack, node_uuid, states.PROVIDE)
    assert response.status_code == 409, response.text
    assert "another-conductor" in error_text(response)
    assert _snapshot(quiet_stack, node_uuid) == before


def test_cases_leave_no_stray_work(quiet_stack: Stack) -> None:
    """Sanity check of the fixture: no conductor ran, so every queued item is still pending."""
    with quiet_stack.db.read() as session:
        running = session.scalar(
            select(func.count()).select_from(WorkItem).where(WorkItem.state != "pending")
        )
    assert running == 0
