"""Random verb sequences through the API, against a running conductor.

Hypothesis drives a few fake-hardware nodes with API verbs, mostly ones the
table allows in the node's current state and sometimes any verb at all, and
lets the conductor run each flow to its end (or to a wait state) before the
next step. After every step the nodes must satisfy the state machine's
invariants, read in one database snapshot so that a conductor working at the
same moment cannot make them disagree:

* the provision state is a known one, shown with the target Ironic would
  show: none in a stable state, the flow's goal in a busy one, the fixed goal
  in a failure state (in every history entry as well);
* a node no flow is working on holds no reservation;
* the node's history is a walk through the table from ``enroll`` that ends in
  the node's current state, and its last event shows the current state;
* a verb refused on a resting node changed nothing.

Some nodes fail chosen steps (``driver_info.fake_fail_steps``) to reach the
failure states, one takes time over its steps to be caught in wait states.
"""

from __future__ import annotations

import re
import time
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import func, select

from metalforge import states
from metalforge.db import queue
from metalforge.db.models import Node, NodeHistory, WorkItem
from tests.support.api import LATEST, create_node
from tests.support.stack import Stack

NODES = 3
SETTLE_TIMEOUT = 30.0
SLOW_STEP_DELAY = 0.1
"""Seconds each step of the slow node takes: long enough to be seen in a wait state."""
FAILABLE_STEPS = [
    "deploy.write_image",
    "deploy.deploy",
    "deploy.erase_devices",
    "deploy.erase_devices_metadata",
    "inspect.inspect_hardware",
]
STEP_CHOICES = [
    [{"interface": "deploy", "step": "erase_devices_metadata"}],
    [{"interface": "deploy", "step": "erase_devices"}],
    [{"interface": "management", "step": "reset_bios"}],
]
"""Steps for manual cleaning; ``erase_devices`` is asynchronous."""
SERVICE_STEPS = [{"interface": "management", "step": "reset_bios"}]
"""The step servicing runs: servicing takes service steps only (the disks' are not)."""
ANY_TARGET = sorted({*states.VERBS, *states.VERB_ALIASES})
TRANSITION_EVENT = re.compile(r"^(?P<source>[a-z -]+) -> (?P<target>[a-z -]+) \((?P<event>\w+)\)")
QUIET_STATES = frozenset(states.STATES) - states.BUSY_STATES
"""States in which no flow runs: nothing but an API request changes the node."""
PAUSED_STATES = states.WAIT_STATES | states.HOLD_STATES
CLEAN_FAMILY = frozenset({states.CLEANING, states.CLEAN_WAIT, states.CLEAN_HOLD})
MAINTENANCE_BLOCKED = frozenset({states.DEPLOY, states.REBUILD, states.CLEAN})
"""Verbs refused while the node is in maintenance (as Ironic: 400)."""


def blocked_by_maintenance(state: str, verb: str) -> bool:
    """Refused in maintenance: those verbs, and retrying a failed clean with ``provide``."""
    return verb in MAINTENANCE_BLOCKED or (verb == states.PROVIDE and state == states.CLEAN_FAILED)


START_PATHS = {
    states.ENROLL: [],
    states.MANAGEABLE: [states.MANAGE],
    states.AVAILABLE: [states.MANAGE, states.PROVIDE],
    states.ACTIVE: [states.MANAGE, states.PROVIDE, states.DEPLOY],
}
"""Verbs that take a new node to where an example starts it."""
CHOICE = [False, False, False, True]
"""Whether a step sends any verb rather than an allowed one: one time in four."""


@dataclass(frozen=True)
class Seen:
    """One node as the database holds it at one moment."""

    provision_state: str
    target_provision_state: str | None
    reservation: str | None
    epoch: int
    maintenance: bool
    unfinished_work: int
    history: tuple[tuple[str, str | None, str | None], ...]
    """(event, state, target_provision_state) of every history entry, oldest first."""

    @property
    def quiet(self) -> bool:
        """Resting with nothing left to do: an API request is the only thing that can move it."""
        return (
            self.provision_state in QUIET_STATES
            and self.reservation is None
            and self.unfinished_work == 0
        )

    @property
    def settled(self) -> bool:
        return self.quiet or self.provision_state in PAUSED_STATES


def _look(stack: Stack, uuids: list[str]) -> dict[str, Seen]:
    """Every node in one read transaction, so the values agree with each other."""
    found: dict[str, Seen] = {}
    with stack.db.read() as session:
        for node in session.scalars(select(Node).where(Node.uuid.in_(uuids))):
            unfinished = session.scalar(
                select(func.count())
                .select_from(WorkItem)
                .where(
                    WorkItem.node_id == node.id,
                    WorkItem.state.in_([queue.PENDING, queue.CLAIMED]),
                )
            )
            history = session.execute(
                select(NodeHistory.event, NodeHistory.state, NodeHistory.target_provision_state)
                .where(NodeHistory.node_id == node.id)
                .order_by(NodeHistory.id)
            ).all()
            found[node.uuid] = Seen(
                node.provision_state,
                node.target_provision_state,
                node.reservation,
                node.epoch,
                node.maintenance,
                int(unfinished or 0),
                tuple((row[0], row[1], row[2]) for row in history),
            )
    return found


def _target_fits(state: str, target: str | None) -> bool:
    """Whether Ironic would show ``target`` as ``target_provision_state`` in ``state``.

    Stable states have none; the cleaning states head for ``available`` or
    ``manageable``; every other state has its one goal.
    """
    if states.STATES[state].stable:
        return target is None
    if state in CLEAN_FAMILY:
        return target in (states.AVAILABLE, states.MANAGEABLE)
    return target == states.STATES[state].goal


class ProvisionMachine(RuleBasedStateMachine):
    """A few nodes, random verbs, the invariants checked after every step."""

    def __init__(self, stack: Stack) -> None:
        super().__init__()
        self.stack = stack
        self.uuids: list[str] = []
        self.epochs: dict[str, int] = {}

    @initialize(
        failing=st.sets(st.sampled_from(FAILABLE_STEPS), min_size=1, max_size=2),
        starts=st.lists(st.sampled_from(sorted(START_PATHS)), min_size=NODES, max_size=NODES),
    )
    def enroll(self, failing: set[str], starts: list[str]) -> None:
        """A plain node, a slow one (wait states) and one whose chosen steps fail.

        Each is first taken some way along the usual path (manage, provide,
        deploy), so that a dozen random steps reach the deeper states too.
        """
        driver_infos: list[dict[str, Any]] = [
            {},
            {"fake_step_delay": SLOW_STEP_DELAY},
            {"fake_fail_steps": ",".join(sorted(failing))},
        ]
        for info, start in zip(driver_infos, starts, strict=True):
            node = create_node(
                self.stack.client, name=f"sm-{uuidlib.uuid4().hex[:10]}", driver_info=info
            )
            self.uuids.append(node["uuid"])
            for verb in START_PATHS[start]:
                if verb not in states.allowed_events(self._look()[node["uuid"]].provision_state):
                    break  # a step failed on the way: start from the failure state
                response = self._put(node["uuid"], {"target": verb})
                assert response.status_code == 202, response.text
                self._settle()

    # -- rules --------------------------------------------------------------------------

    @rule(
        index=st.integers(0, NODES - 1),
        pick=st.integers(0, 255),
        anything=st.sampled_from(CHOICE),
        any_target=st.sampled_from(ANY_TARGET),
        step_list=st.sampled_from(STEP_CHOICES),
    )
    def send_verb(
        self,
        index: int,
        pick: int,
        anything: bool,
        any_target: str,
        step_list: list[dict[str, str]],
    ) -> None:
        """Mostly a verb the table allows, so nodes travel the whole machine; sometimes any.

        Any verb includes the aliases; most are refused, and a refusal must change nothing.
        Every draw is made whatever the node's state (``pick`` chooses among the allowed
        verbs), so that Hypothesis replays the same choices even though a flow's timing
        may differ between runs.
        """
        uuid = self.uuids[index]
        seen = self._look()[uuid]
        allowed = [e for e in states.allowed_events(seen.provision_state) if e in states.VERBS]
        if anything or not allowed:
            self._send(uuid, any_target, step_list)
            return
        verb = allowed[pick % len(allowed)]
        if seen.maintenance and blocked_by_maintenance(seen.provision_state, verb):
            # A failed clean left the node in maintenance, which blocks deploying,
            # manual cleaning and retrying the clean.
            response = self.stack.client.delete(f"/v1/nodes/{uuid}/maintenance", headers=LATEST)
            assert response.status_code == 202, response.text
        self._send(uuid, verb, step_list)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def nodes_obey_the_table(self) -> None:
        for uuid, seen in self._look().items():
            self._check(uuid, seen)

    # -- helpers --------------------------------------------------------------------------

    def _look(self) -> dict[str, Seen]:
        return _look(self.stack, self.uuids)

    def _put(self, uuid: str, body: dict[str, Any]) -> Any:
        return self.stack.client.put(
            f"/v1/nodes/{uuid}/states/provision", json=body, headers=LATEST
        )

    def _send(self, uuid: str, target: str, step_list: list[dict[str, str]]) -> None:
        verb = states.VERB_ALIASES.get(target, target)
        body: dict[str, Any] = {"target": target}
        if verb == states.CLEAN:
            body["clean_steps"] = step_list
        elif verb == states.SERVICE:
            body["service_steps"] = SERVICE_STEPS
        elif verb == states.RESCUE_VERB:
            body["rescue_password"] = "s3cret"
        before = self._look()[uuid]
        response = self._put(uuid, body)
        if before.quiet:
            allowed = verb in states.allowed_events(before.provision_state)
            blocked = before.maintenance and blocked_by_maintenance(before.provision_state, verb)
            expected = 202 if allowed and not blocked else 400
            assert response.status_code == expected, (before.provision_state, response.text)
            if expected == 400:
                assert self._look()[uuid] == before, "a refused verb changed the node"
        else:
            # A flow may move the node between our read and the request.
            assert response.status_code in (202, 400, 409), response.text
        self._settle()

    def _settle(self) -> None:
        """Wait until every node rests or waits on something outside the conductor."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        seen = self._look()
        while not all(s.settled for s in seen.values()):
            assert time.monotonic() < deadline, f"nodes did not settle: {seen}"
            time.sleep(0.02)
            seen = self._look()

    def _check(self, uuid: str, seen: Seen) -> None:
        assert seen.provision_state in states.STATES, seen
        assert _target_fits(seen.provision_state, seen.target_provision_state), seen
        if seen.quiet:
            assert seen.reservation is None, seen
        assert seen.epoch >= self.epochs.get(uuid, 0), "the epoch went backwards"
        self.epochs[uuid] = seen.epoch
        self._check_history(seen)

    def _check_history(self, seen: Seen) -> None:
        """The recorded transitions chain through the table from enroll to the current state."""
        current = states.ENROLL
        goal: str | None = None
        for event, _, _ in seen.history:
            match = TRANSITION_EVENT.match(event)
            if match is None:
                continue
            assert match["source"] == current, (event, current)
            moved = states.resolve(states.find(current, match["event"]), goal)
            assert match["target"] == moved[0], (event, moved)
            current, goal = moved
        assert (current, goal) == (seen.provision_state, seen.target_provision_state), seen
        # Entries carry the state they happened in (a periodic takeover note carries none).
        stamped = [(state, target) for _, state, target in seen.history if state is not None]
        for state, target in stamped:
            assert _target_fits(state, target), seen.history
        if stamped:
            assert stamped[-1] == (current, goal), seen.history


@pytest.mark.slow
def test_random_verb_sequences_keep_the_invariants(sqlite_stack: Stack) -> None:
    class OnTheStack(ProvisionMachine):
        """The machine bound to this test's stack: hypothesis builds it without arguments."""

        def __init__(self) -> None:
            super().__init__(sqlite_stack)

    run_state_machine_as_test(
        OnTheStack,
        settings=settings(
            max_examples=15,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
