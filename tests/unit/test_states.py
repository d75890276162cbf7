"""The provision state table on its own: consistent, complete and Ironic's.

Everything else (the API's verb check, the conductor's flows, the docs
diagram, the exhaustive API tests) trusts this table, so its mistakes would
spread everywhere at once. These tests read it as data, with no database.
"""

from __future__ import annotations

import importlib.util
from collections import deque
from pathlib import Path
from types import ModuleType

import pytest

from metalforge import states

REPO = Path(__file__).resolve().parents[2]

CLEAN_FAMILY = frozenset({states.CLEANING, states.CLEAN_WAIT, states.CLEAN_HOLD})
"""The only states whose goal varies: ``available`` after provide, ``manageable`` after clean."""

IRONIC_GOALS: dict[str, frozenset[str | None]] = {
    name: (
        frozenset({states.AVAILABLE, states.MANAGEABLE})
        if name in CLEAN_FAMILY
        else frozenset({state.goal})
    )
    for name, state in states.STATES.items()
}
"""The ``target_provision_state`` Ironic reports in each state (API.md §5.1; stable: null)."""


def _graph() -> dict[str, set[str]]:
    """Every state each state can move to, with ``GOAL`` expanded to the goals it may hold."""
    edges: dict[str, set[str]] = {name: set() for name in states.STATES}
    for t in states.TRANSITIONS:
        if t.target == states.GOAL:
            edges[t.source].update(g for g in IRONIC_GOALS[t.source] if g is not None)
        else:
            edges[t.source].add(t.target)
    return edges


def _reachable(start: str, edges: dict[str, set[str]]) -> set[str]:
    seen = {start}
    todo = deque([start])
    while todo:
        for nxt in edges[todo.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _walk_from_enroll() -> set[tuple[str, str | None]]:
    """Every (provision_state, target_provision_state) a node can reach through ``resolve``."""
    start: tuple[str, str | None] = (states.ENROLL, None)
    seen = {start}
    todo = deque([start])
    while todo:
        state, goal = todo.popleft()
        for t in states.TRANSITIONS:
            if t.source != state:
                continue
            nxt = states.resolve(t, goal)
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


# -- the table is well formed ---------------------------------------------------------------


@pytest.mark.parametrize("transition", states.TRANSITIONS, ids=str)
def test_transition_names_known_states_and_events(transition: states.Transition) -> None:
    assert transition.source in states.STATES
    assert transition.target in states.STATES or transition.target == states.GOAL
    assert transition.goal is None or transition.goal in states.STATES
    assert transition.event in states.VERBS or transition.event in states.INTERNAL_EVENTS


def test_each_source_and_event_has_one_row() -> None:
    """``find`` indexes by (source, event): a second row would be silently ignored."""
    keys = [(t.source, t.event) for t in states.TRANSITIONS]
    assert len(keys) == len(set(keys))


def test_goal_rows_leave_busy_states_only() -> None:
    """Only a running flow has a goal to finish at; ``done`` in a resting state means nothing."""
    for t in states.TRANSITIONS:
        if t.target == states.GOAL:
            assert states.STATES[t.source].busy, t


def test_verbs_and_internal_events_are_distinct_and_all_used() -> None:
    assert not set(states.VERBS) & set(states.INTERNAL_EVENTS)
    used = {t.event for t in states.TRANSITIONS}
    assert set(states.VERBS) <= used
    assert set(states.INTERNAL_EVENTS) <= used
    assert set(states.VERB_ALIASES.values()) <= set(states.VERBS)


def test_state_kinds() -> None:
    """Stable states carry no goal; every other state says where its flow is heading."""
    for state in states.STATES.values():
        if state.stable:
            assert state.goal is None, state.name
        else:
            assert state.goal in states.STATES, state.name
            assert states.STATES[state.goal].stable, state.name
    stable = {"enroll", "manageable", "available", "active", "error", "rescue"}
    assert stable == states.STABLE_STATES
    failed = {name for name in states.STATES if name.endswith(" failed")}
    assert failed | {states.ERROR} == states.FAILURE_STATES
    assert states.WAIT_STATES <= states.BUSY_STATES
    assert states.HOLD_STATES <= states.BUSY_STATES
    assert states.BUSY_STATES.isdisjoint(states.STABLE_STATES | states.FAILURE_STATES)
    assert set(states.STATES) == states.BUSY_STATES | states.STABLE_STATES | states.FAILURE_STATES
    assert {
        "inspect wait",
        "clean wait",
        "wait call-back",
        "rescue wait",
        "service wait",
    } == states.WAIT_STATES
    assert {"clean hold", "deploy hold", "service hold"} == states.HOLD_STATES


def test_every_busy_state_and_only_one_names_its_flow() -> None:
    """Metrics, failure counts and progress read a state's flow from the table: a busy
    state without one would go uncounted, so the table refuses it."""
    assert set(states.FLOW_OF) == states.BUSY_STATES
    assert states.FLOW_OF[states.CLEAN_HOLD] == "clean"
    with pytest.raises(ValueError, match="names its flow"):
        states.State("tidying", "A new flow's busy state.", states.MANAGEABLE)
    with pytest.raises(ValueError, match="names its flow"):
        states.State("tidy", "A resting state.", stable=True, flow="tidy")


# -- resolve ------------------------------------------------------------------------------

RESOLVE_CASES: list[tuple[str, str, str | None, tuple[str, str | None]]] = [
    (states.ENROLL, states.MANAGE, None, (states.VERIFYING, states.MANAGEABLE)),
    (states.VERIFYING, states.DONE, states.MANAGEABLE, (states.MANAGEABLE, None)),
    (states.VERIFYING, states.FAIL, states.MANAGEABLE, (states.ENROLL, None)),
    (states.MANAGEABLE, states.PROVIDE, None, (states.CLEANING, states.AVAILABLE)),
    (states.MANAGEABLE, states.CLEAN, None, (states.CLEANING, states.MANAGEABLE)),
    (states.MANAGEABLE, states.INSPECT, None, (states.INSPECTING, states.MANAGEABLE)),
    (states.MANAGEABLE, states.ADOPT, None, (states.ADOPTING, states.ACTIVE)),
    (states.CLEANING, states.DONE, states.AVAILABLE, (states.AVAILABLE, None)),
    (states.CLEANING, states.DONE, states.MANAGEABLE, (states.MANAGEABLE, None)),
    (states.CLEANING, states.WAIT, states.MANAGEABLE, (states.CLEAN_WAIT, states.MANAGEABLE)),
    (states.CLEAN_WAIT, states.RESUME, states.MANAGEABLE, (states.CLEANING, states.MANAGEABLE)),
    (states.CLEAN_WAIT, states.HOLD, states.MANAGEABLE, (states.CLEAN_HOLD, states.MANAGEABLE)),
    (states.CLEAN_HOLD, states.UNHOLD, states.MANAGEABLE, (states.CLEAN_WAIT, states.MANAGEABLE)),
    # Failure states keep their fixed goal, whatever the flow was heading for.
    (states.CLEANING, states.FAIL, states.AVAILABLE, (states.CLEAN_FAILED, states.MANAGEABLE)),
    (states.CLEAN_WAIT, states.ABORT, states.AVAILABLE, (states.CLEAN_FAILED, states.MANAGEABLE)),
    (states.DEPLOYING, states.FAIL, states.ACTIVE, (states.DEPLOY_FAILED, states.ACTIVE)),
    (
        states.INSPECT_WAIT,
        states.ABORT,
        states.MANAGEABLE,
        (states.INSPECT_FAILED, states.MANAGEABLE),
    ),
    (states.RESCUE_WAIT, states.ABORT, states.RESCUE, (states.RESCUE_FAILED, states.RESCUE)),
    (states.AVAILABLE, states.MANAGE, None, (states.MANAGEABLE, None)),
    (states.AVAILABLE, states.DEPLOY, None, (states.DEPLOYING, states.ACTIVE)),
    (states.DEPLOYING, states.WAIT, states.ACTIVE, (states.DEPLOY_WAIT, states.ACTIVE)),
    (states.DEPLOY_WAIT, states.DONE, states.ACTIVE, (states.ACTIVE, None)),
    (states.ACTIVE, states.UNDEPLOY, None, (states.DELETING, states.AVAILABLE)),
    (states.DELETING, states.DONE, states.AVAILABLE, (states.CLEANING, states.AVAILABLE)),
    (states.DELETING, states.FAIL, states.AVAILABLE, (states.ERROR, None)),
    # Undeploying a node whose flow was heading elsewhere starts a new flow to available.
    (states.DEPLOY_WAIT, states.UNDEPLOY, states.ACTIVE, (states.DELETING, states.AVAILABLE)),
    (states.RESCUE_WAIT, states.UNDEPLOY, states.RESCUE, (states.DELETING, states.AVAILABLE)),
    (states.SERVICE_WAIT, states.UNDEPLOY, states.ACTIVE, (states.DELETING, states.AVAILABLE)),
    (states.RESCUE, states.UNRESCUE, None, (states.UNRESCUING, states.ACTIVE)),
    (states.RESCUE_FAILED, states.RESCUE_VERB, states.RESCUE, (states.RESCUING, states.RESCUE)),
    (states.SERVICE_HOLD, states.SERVICE, states.ACTIVE, (states.SERVICING, states.ACTIVE)),
    (states.SERVICE_FAILED, states.ABORT, states.ACTIVE, (states.ACTIVE, None)),
    (states.ERROR, states.REBUILD, None, (states.DEPLOYING, states.ACTIVE)),
]


@pytest.mark.parametrize(
    ("source", "event", "goal", "expected"),
    RESOLVE_CASES,
    ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in RESOLVE_CASES],
)
def test_resolve(
    source: str, event: str, goal: str | None, expected: tuple[str, str | None]
) -> None:
    assert states.resolve(states.find(source, event), goal) == expected


def test_done_without_a_goal_is_refused() -> None:
    """A busy node that lost its goal must not be guessed somewhere."""
    with pytest.raises(states.InvalidTransition):
        states.resolve(states.find(states.CLEANING, states.DONE), None)


def test_find_refuses_what_the_table_lacks() -> None:
    with pytest.raises(
        states.InvalidTransition, match="'provide' is not allowed in state 'enroll'"
    ):
        states.find(states.ENROLL, states.PROVIDE)
    assert states.allowed_events(states.ENROLL) == [states.MANAGE]


def test_every_reachable_target_is_the_one_ironic_reports() -> None:
    """Walking the table from enroll, a state is never paired with a goal Ironic would not show.

    Clients read ``target_provision_state`` to know what they wait for, so a
    goal carried over from an abandoned flow (say ``active`` while deleting)
    would mislead them.
    """
    for state, goal in _walk_from_enroll():
        assert goal in IRONIC_GOALS[state] or (goal is None and states.STATES[state].stable), (
            state,
            goal,
        )


# -- the graph ----------------------------------------------------------------------------


def test_every_state_is_reachable_from_enroll() -> None:
    assert _reachable(states.ENROLL, _graph()) == set(states.STATES)
    assert {state for state, _ in _walk_from_enroll()} == set(states.STATES)


@pytest.mark.parametrize("name", sorted(states.BUSY_STATES))
def test_every_busy_state_can_end(name: str) -> None:
    """A node never stays busy for good: it can finish, fail or be aborted, and rest."""
    events = set(states.allowed_events(name))
    assert events & {states.DONE, states.FAIL, states.ABORT}, events
    rest = states.STABLE_STATES | states.FAILURE_STATES
    assert _reachable(name, _graph()) & rest


@pytest.mark.parametrize("name", sorted(states.FAILURE_STATES))
def test_every_failure_state_has_a_way_out_through_the_api(name: str) -> None:
    assert set(states.allowed_events(name)) & set(states.VERBS)


# -- the generated documentation --------------------------------------------------------


def _state_diagram() -> ModuleType:
    path = REPO / "tools" / "state_diagram.py"
    spec = importlib.util.spec_from_file_location("state_diagram", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_states_md_matches_the_table() -> None:
    """docs/states.md is generated: it must never drift from the table it documents."""
    generator = _state_diagram()
    committed = (REPO / "docs" / "states.md").read_text(encoding="utf-8")
    assert committed == generator.render(), (
        "docs/states.md is stale; regenerate it with: .venv/bin/python tools/state_diagram.py"
    )


def test_diagram_shows_every_transition() -> None:
    text = _state_diagram().render()
    for t in states.TRANSITIONS:
        assert f"| {t.source} | {t.event} |" in text
