"""The node provision state machine, as one declarative table.

Every provision state change in metalforge is a row of ``TRANSITIONS``: the
API checks a verb against it, the conductor drives flows through it, the
documentation diagram and the exhaustive transition tests are generated from
it. Nothing else decides whether a node may move.

A *transient* state belongs to a flow and carries a goal, reported to clients
as ``target_provision_state`` (for ``cleaning`` the goal is ``available`` after
``provide`` and ``manageable`` after a manual ``clean``). The internal ``done``
event moves a node to its goal, which is why its rows name ``GOAL`` rather than
a fixed state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ENROLL: Final = "enroll"
VERIFYING: Final = "verifying"
MANAGEABLE: Final = "manageable"
INSPECTING: Final = "inspecting"
INSPECT_WAIT: Final = "inspect wait"
INSPECT_FAILED: Final = "inspect failed"
CLEANING: Final = "cleaning"
CLEAN_WAIT: Final = "clean wait"
CLEAN_HOLD: Final = "clean hold"
CLEAN_FAILED: Final = "clean failed"
AVAILABLE: Final = "available"
DEPLOYING: Final = "deploying"
DEPLOY_WAIT: Final = "wait call-back"
DEPLOY_HOLD: Final = "deploy hold"
DEPLOY_FAILED: Final = "deploy failed"
ACTIVE: Final = "active"
DELETING: Final = "deleting"
ERROR: Final = "error"
ADOPTING: Final = "adopting"
ADOPT_FAILED: Final = "adopt failed"
RESCUING: Final = "rescuing"
RESCUE_WAIT: Final = "rescue wait"
RESCUE: Final = "rescue"
RESCUE_FAILED: Final = "rescue failed"
UNRESCUING: Final = "unrescuing"
UNRESCUE_FAILED: Final = "unrescue failed"
SERVICING: Final = "servicing"
SERVICE_WAIT: Final = "service wait"
SERVICE_HOLD: Final = "service hold"
SERVICE_FAILED: Final = "service failed"

GOAL: Final = "<goal>"
"""Placeholder target: the goal recorded when the node's current flow began."""


@dataclass(frozen=True, slots=True)
class State:
    """One provision state."""

    name: str
    description: str
    goal: str | None = None
    """For transient and failure states, the default ``target_provision_state``."""
    stable: bool = False
    """Stable states are where a node rests; no conductor is working on it."""
    failure: bool = False
    """A flow ended badly here; clients stop waiting on it."""
    flow: str | None = None
    """For busy states, the flow they belong to, as metrics, failure counts and progress
    name it (``clean`` for ``cleaning``, ``clean wait`` and ``clean hold``); required of a
    busy state, so a new flow's states cannot go uncounted."""

    def __post_init__(self) -> None:
        if self.busy != (self.flow is not None):
            raise ValueError(f"state {self.name!r}: a busy state, and only one, names its flow")

    @property
    def busy(self) -> bool:
        """A conductor owns the node while it is in this state (a flow is running)."""
        return not self.stable and not self.failure


STATES: Final[dict[str, State]] = {
    s.name: s
    for s in (
        State(ENROLL, "Registered; the BMC credentials are not verified yet.", stable=True),
        State(
            VERIFYING,
            "Checking that the BMC answers with the given credentials.",
            MANAGEABLE,
            flow="verify",
        ),
        State(
            MANAGEABLE, "Verified and under operator control; not offered to tenants.", stable=True
        ),
        State(INSPECTING, "Collecting the hardware inventory.", MANAGEABLE, flow="inspect"),
        State(
            INSPECT_WAIT,
            "Waiting for the inspection ramdisk to report.",
            MANAGEABLE,
            flow="inspect",
        ),
        State(INSPECT_FAILED, "Inspection failed; see last_error.", MANAGEABLE, failure=True),
        State(CLEANING, "Running clean steps.", AVAILABLE, flow="clean"),
        State(
            CLEAN_WAIT, "Waiting for an asynchronous clean step to finish.", AVAILABLE, flow="clean"
        ),
        State(CLEAN_HOLD, "Cleaning paused by a hold step until unhold.", AVAILABLE, flow="clean"),
        State(CLEAN_FAILED, "A clean step failed; see last_error.", MANAGEABLE, failure=True),
        State(AVAILABLE, "Clean and ready to be deployed.", stable=True),
        State(DEPLOYING, "Running deploy steps.", ACTIVE, flow="deploy"),
        State(
            DEPLOY_WAIT, "Waiting for an asynchronous deploy step to finish.", ACTIVE, flow="deploy"
        ),
        State(DEPLOY_HOLD, "Deployment paused by a hold step until unhold.", ACTIVE, flow="deploy"),
        State(DEPLOY_FAILED, "A deploy step failed; see last_error.", ACTIVE, failure=True),
        State(ACTIVE, "Deployed and in use by a tenant.", stable=True),
        State(DELETING, "Tearing the deployment down before cleaning.", AVAILABLE, flow="undeploy"),
        State(ERROR, "Tearing down a deployment failed.", stable=True, failure=True),
        State(
            ADOPTING, "Taking over a node that is already running a workload.", ACTIVE, flow="adopt"
        ),
        State(ADOPT_FAILED, "Adoption failed; see last_error.", ACTIVE, failure=True),
        State(RESCUING, "Booting the rescue ramdisk.", RESCUE, flow="rescue"),
        State(RESCUE_WAIT, "Waiting for the rescue ramdisk.", RESCUE, flow="rescue"),
        State(RESCUE, "Running the rescue ramdisk for the tenant.", stable=True),
        State(RESCUE_FAILED, "Rescue failed; see last_error.", RESCUE, failure=True),
        State(UNRESCUING, "Returning from rescue to the instance.", ACTIVE, flow="unrescue"),
        State(UNRESCUE_FAILED, "Unrescue failed; see last_error.", ACTIVE, failure=True),
        State(SERVICING, "Running service steps on an active node.", ACTIVE, flow="service"),
        State(SERVICE_WAIT, "Waiting for an asynchronous service step.", ACTIVE, flow="service"),
        State(
            SERVICE_HOLD, "Servicing paused by a hold step until unhold.", ACTIVE, flow="service"
        ),
        State(SERVICE_FAILED, "A service step failed; see last_error.", ACTIVE, failure=True),
    )
}

# API verbs, as clients send them in ``{"target": ...}``.
MANAGE: Final = "manage"
PROVIDE: Final = "provide"
INSPECT: Final = "inspect"
CLEAN: Final = "clean"
DEPLOY: Final = "active"
REBUILD: Final = "rebuild"
UNDEPLOY: Final = "deleted"
ABORT: Final = "abort"
ADOPT: Final = "adopt"
RESCUE_VERB: Final = "rescue"
UNRESCUE: Final = "unrescue"
UNHOLD: Final = "unhold"
SERVICE: Final = "service"

VERBS: Final = (
    MANAGE,
    PROVIDE,
    INSPECT,
    CLEAN,
    DEPLOY,
    REBUILD,
    UNDEPLOY,
    ABORT,
    ADOPT,
    RESCUE_VERB,
    UNRESCUE,
    UNHOLD,
    SERVICE,
)
"""Events an API caller may request."""

VERB_ALIASES: Final = {"deploy": DEPLOY, "undeploy": UNDEPLOY}
"""Newer spellings (API 1.73) mapped to the canonical verb."""

# Internal events, raised by the conductor as a flow progresses.
DONE: Final = "done"
FAIL: Final = "fail"
WAIT: Final = "wait"
RESUME: Final = "resume"
HOLD: Final = "hold"

INTERNAL_EVENTS: Final = (DONE, FAIL, WAIT, RESUME, HOLD)

CONTINUING_EVENTS: Final = frozenset({WAIT, RESUME, HOLD, UNHOLD})
"""Events within one flow: the node keeps the goal the flow started with."""


@dataclass(frozen=True, slots=True)
class Transition:
    """``event`` moves a node from ``source`` to ``target``."""

    source: str
    event: str
    target: str
    goal: str | None = None
    """Goal of the flow this transition starts; default: the target state's own goal."""


def _t(source: str, event: str, target: str, goal: str | None = None) -> Transition:
    return Transition(source, event, target, goal)


TRANSITIONS: Final[tuple[Transition, ...]] = (
    _t(ENROLL, MANAGE, VERIFYING),
    _t(VERIFYING, DONE, GOAL),
    _t(VERIFYING, FAIL, ENROLL),
    _t(MANAGEABLE, PROVIDE, CLEANING, AVAILABLE),
    _t(MANAGEABLE, CLEAN, CLEANING, MANAGEABLE),
    _t(MANAGEABLE, INSPECT, INSPECTING),
    _t(MANAGEABLE, ADOPT, ADOPTING),
    _t(INSPECTING, DONE, GOAL),
    _t(INSPECTING, WAIT, INSPECT_WAIT),
    _t(INSPECTING, FAIL, INSPECT_FAILED),
    _t(INSPECT_WAIT, RESUME, INSPECTING),
    _t(INSPECT_WAIT, DONE, GOAL),
    _t(INSPECT_WAIT, FAIL, INSPECT_FAILED),
    _t(INSPECT_WAIT, ABORT, INSPECT_FAILED),
    _t(INSPECT_FAILED, MANAGE, MANAGEABLE),
    _t(INSPECT_FAILED, INSPECT, INSPECTING),
    _t(CLEANING, DONE, GOAL),
    _t(CLEANING, WAIT, CLEAN_WAIT),
    _t(CLEANING, HOLD, CLEAN_HOLD),
    _t(CLEANING, FAIL, CLEAN_FAILED),
    _t(CLEAN_WAIT, RESUME, CLEANING),
    _t(CLEAN_WAIT, FAIL, CLEAN_FAILED),
    _t(CLEAN_WAIT, ABORT, CLEAN_FAILED),
    _t(CLEAN_WAIT, HOLD, CLEAN_HOLD),
    _t(CLEAN_HOLD, UNHOLD, CLEAN_WAIT),
    _t(CLEAN_HOLD, ABORT, CLEAN_FAILED),
    _t(CLEAN_FAILED, MANAGE, MANAGEABLE),
    # The operator retries a failed clean (seed 000): automated, or manual with steps.
    _t(CLEAN_FAILED, PROVIDE, CLEANING, AVAILABLE),
    _t(CLEAN_FAILED, CLEAN, CLEANING, MANAGEABLE),
    _t(AVAILABLE, DEPLOY, DEPLOYING),
    _t(AVAILABLE, MANAGE, MANAGEABLE),
    _t(DEPLOYING, DONE, GOAL),
    _t(DEPLOYING, WAIT, DEPLOY_WAIT),
    _t(DEPLOYING, HOLD, DEPLOY_HOLD),
    _t(DEPLOYING, FAIL, DEPLOY_FAILED),
    _t(DEPLOY_WAIT, RESUME, DEPLOYING),
    _t(DEPLOY_WAIT, DONE, GOAL),
    _t(DEPLOY_WAIT, FAIL, DEPLOY_FAILED),
    _t(DEPLOY_WAIT, ABORT, DEPLOY_FAILED),
    _t(DEPLOY_WAIT, UNDEPLOY, DELETING),
    _t(DEPLOY_HOLD, UNHOLD, DEPLOY_WAIT),
    _t(DEPLOY_HOLD, ABORT, DEPLOY_FAILED),
    _t(DEPLOY_FAILED, DEPLOY, DEPLOYING),
    _t(DEPLOY_FAILED, REBUILD, DEPLOYING),
    _t(DEPLOY_FAILED, UNDEPLOY, DELETING),
    _t(ACTIVE, REBUILD, DEPLOYING),
    _t(ACTIVE, UNDEPLOY, DELETING),
    _t(ACTIVE, RESCUE_VERB, RESCUING),
    _t(ACTIVE, SERVICE, SERVICING),
    _t(DELETING, DONE, CLEANING, AVAILABLE),
    _t(DELETING, FAIL, ERROR),
    _t(ERROR, REBUILD, DEPLOYING),
    _t(ERROR, UNDEPLOY, DELETING),
    _t(ADOPTING, DONE, GOAL),
    _t(ADOPTING, FAIL, ADOPT_FAILED),
    _t(ADOPT_FAILED, ADOPT, ADOPTING),
    _t(ADOPT_FAILED, MANAGE, MANAGEABLE),
    _t(RESCUING, DONE, GOAL),
    _t(RESCUING, WAIT, RESCUE_WAIT),
    _t(RESCUING, FAIL, RESCUE_FAILED),
    _t(RESCUE_WAIT, RESUME, RESCUING),
    _t(RESCUE_WAIT, DONE, GOAL),
    _t(RESCUE_WAIT, FAIL, RESCUE_FAILED),
    _t(RESCUE_WAIT, ABORT, RESCUE_FAILED),
    _t(RESCUE_WAIT, UNDEPLOY, DELETING),
    _t(RESCUE, RESCUE_VERB, RESCUING),
    _t(RESCUE, UNRESCUE, UNRESCUING),
    _t(RESCUE, UNDEPLOY, DELETING),
    _t(RESCUE_FAILED, RESCUE_VERB, RESCUING),
    _t(RESCUE_FAILED, UNRESCUE, UNRESCUING),
    _t(RESCUE_FAILED, UNDEPLOY, DELETING),
    _t(UNRESCUING, DONE, GOAL),
    _t(UNRESCUING, FAIL, UNRESCUE_FAILED),
    _t(UNRESCUE_FAILED, RESCUE_VERB, RESCUING),
    _t(UNRESCUE_FAILED, UNRESCUE, UNRESCUING),
    _t(UNRESCUE_FAILED, UNDEPLOY, DELETING),
    _t(SERVICING, DONE, GOAL),
    _t(SERVICING, WAIT, SERVICE_WAIT),
    _t(SERVICING, HOLD, SERVICE_HOLD),
    _t(SERVICING, FAIL, SERVICE_FAILED),
    _t(SERVICE_WAIT, RESUME, SERVICING),
    _t(SERVICE_WAIT, FAIL, SERVICE_FAILED),
    _t(SERVICE_WAIT, ABORT, SERVICE_FAILED),
    _t(SERVICE_WAIT, UNDEPLOY, DELETING),
    _t(SERVICE_WAIT, HOLD, SERVICE_HOLD),
    _t(SERVICE_HOLD, UNHOLD, SERVICE_WAIT),
    _t(SERVICE_HOLD, SERVICE, SERVICING),
    _t(SERVICE_HOLD, ABORT, SERVICE_FAILED),
    _t(SERVICE_FAILED, SERVICE, SERVICING),
    _t(SERVICE_FAILED, RESCUE_VERB, RESCUING),
    _t(SERVICE_FAILED, UNDEPLOY, DELETING),
    _t(SERVICE_FAILED, ABORT, ACTIVE),
)

_INDEX: Final[dict[tuple[str, str], Transition]] = {(t.source, t.event): t for t in TRANSITIONS}

STABLE_STATES: Final = frozenset(s.name for s in STATES.values() if s.stable)
FAILURE_STATES: Final = frozenset(s.name for s in STATES.values() if s.failure)
BUSY_STATES: Final = frozenset(s.name for s in STATES.values() if s.busy)
"""States in which a conductor is working; a dead conductor can leave a node here."""
WAIT_STATES: Final = frozenset(t.target for t in TRANSITIONS if t.event == WAIT)
"""Busy states in which no work runs: the node waits for a callback or a poll (the
states a flow's ``wait`` leads to)."""
HOLD_STATES: Final = frozenset(t.target for t in TRANSITIONS if t.event == HOLD)
"""Busy states in which the node waits for an operator's ``unhold`` or ``abort`` (the
states a ``hold`` step leads to)."""
UPDATE_ALLOWED_STATES: Final = frozenset(
    {
        DEPLOY_FAILED,
        INSPECTING,
        INSPECT_FAILED,
        INSPECT_WAIT,
        CLEAN_FAILED,
        ERROR,
        VERIFYING,
        ADOPT_FAILED,
        RESCUE_FAILED,
        UNRESCUE_FAILED,
        SERVICE_HOLD,
        SERVICE_FAILED,
    }
)
"""States in which a node that has a target may still be patched (Ironic's list)."""


def keeps_its_allocation(state: str, target: str | None) -> bool:
    """Whether a node's allocation may not be removed now (seed 004), maintenance aside.

    Refused for a deployed node (its instance uses it) and while a state
    transition is under way in a state that allows no update.
    """
    return state == ACTIVE or (target is not None and state not in UPDATE_ALLOWED_STATES)


DELETE_ALLOWED_STATES: Final = frozenset({ENROLL, MANAGEABLE, ADOPT_FAILED, AVAILABLE})
"""States from which a node may be deleted outside maintenance."""


def parks(state: str) -> bool:
    """Whether a flow stops working on a node in ``state`` (it rests, fails or waits)."""
    return state not in BUSY_STATES or state in WAIT_STATES or state in HOLD_STATES


class InvalidTransition(ValueError):
    """``event`` is not allowed from ``source``."""

    def __init__(self, source: str, event: str) -> None:
        super().__init__(f"event {event!r} is not allowed in state {source!r}")
        self.source = source
        self.event = event


def find(source: str, event: str) -> Transition:
    """The transition ``event`` takes from ``source``; raises ``InvalidTransition``."""
    try:
        return _INDEX[(source, event)]
    except KeyError:
        raise InvalidTransition(source, event) from None


def allowed_events(source: str) -> list[str]:
    """Every event the table allows from ``source``, in table order."""
    return [t.event for t in TRANSITIONS if t.source == source]


def resolve(transition: Transition, current_goal: str | None) -> tuple[str, str | None]:
    """The (provision_state, target_provision_state) a node takes through ``transition``.

    ``current_goal`` is the node's ``target_provision_state`` before the move.
    A flow that continues (wait, resume, hold, unhold) keeps its goal; a transition
    that starts a flow sets the goal it names, or the new state's default.
    """
    if transition.target == GOAL:
        if current_goal is None:
            raise InvalidTransition(transition.source, transition.event)
        target = current_goal
    else:
        target = transition.target
    state = STATES[target]
    if state.stable:
        return target, None
    if transition.goal is not None:
        return target, transition.goal
    if transition.event in CONTINUING_EVENTS and current_goal is not None:
        return target, current_goal
    return target, state.goal


FLOW_OF: Final[dict[str, str]] = {s.name: s.flow for s in STATES.values() if s.flow is not None}
"""The flow each busy state belongs to, as metrics and the dashboard name it."""

_RESULTS: Final = {DONE: "succeeded", FAIL: "failed"}


@dataclass(frozen=True, slots=True)
class FlowChange:
    """What a move did to flows: one may have ended (with a result), one may have begun."""

    ended: tuple[str, str] | None
    """``(flow, result)``: result is ``succeeded``, ``failed`` or ``aborted``."""
    started: str | None


def flow_change(source: str, event: str, target: str) -> FlowChange:
    """Which flow a move from ``source`` through ``event`` to ``target`` ended or began."""
    before, after = FLOW_OF.get(source), FLOW_OF.get(target)
    if before == after:
        return FlowChange(None, None)
    ended = None if before is None else (before, _RESULTS.get(event, "aborted"))
    return FlowChange(ended, after)
