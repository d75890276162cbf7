"""The declaration of a provision flow: one frozen ``FlowSpec`` per flow.

A flow is what a verb starts (``provide`` starts cleaning, ``active``
deploys): the busy states it runs through, what the conductor does in each
(its hooks), the request fields its verbs take and the checks a request must
pass before the node moves, the columns the verb writes with its transition,
and the setting that bounds its waits. The state sets other code needs (where
the ramdisk agent may look up, where its heartbeat continues a flow, where
operators may not change power) are derived from these declarations in
``catalog``, never written out by hand. Work a conductor runs without
holding a node (allocation matching) is declared as a ``DetachedFlow``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.orm import Session

from metalforge.conductor.context import ConductorContext
from metalforge.conductor.flows.request_fields import RequestField
from metalforge.conductor.stepflow import StepFlow
from metalforge.conductor.task import NodeTask
from metalforge.config import ConductorSettings
from metalforge.db import queue
from metalforge.db.flow_progress import FlowProgress
from metalforge.db.models import Node
from metalforge.drivers.hardware import DriverRegistry

Hook = Callable[[NodeTask], None]
"""What a conductor does for a node in one state of the flow."""


@dataclass(frozen=True)
class FlowRequest:
    """What a provision request asks, as the API parsed it.

    ``given`` names the fields the client sent (a field sent as ``null`` or
    ``[]`` is still given, and may be refused for a verb that does not take
    it). Steps stay as the JSON objects the client sent.
    """

    verb: str
    target: str = ""
    """The verb as the client spelled it (``deploy`` for ``active``), for messages."""
    given: frozenset[str] = frozenset()
    steps: Mapping[RequestField, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    """The steps given, by their field (``CLEAN_STEPS``...: the fields that hold steps)."""
    disable_ramdisk: bool = False
    configdrive: str | dict[str, Any] | None = None
    rescue_password: str | None = None
    runbook: str | None = None
    """The UUID or name of a runbook whose steps stand for the verb's required steps."""
    manage_boot: bool = True
    """Inspection only: metalforge boots the node (false: someone else boots its ramdisk)."""

    def steps_for(self, steps_field: RequestField) -> tuple[dict[str, Any], ...]:
        """The steps given in ``steps_field`` (none when it was not given)."""
        return tuple(self.steps.get(steps_field, ()))

    def provided(self, request_field: RequestField) -> bool:
        """Whether the request carries a non-empty value for ``request_field``."""
        if request_field.holds_steps:
            return bool(self.steps_for(request_field))
        return bool(getattr(self, request_field.name))


@dataclass(frozen=True)
class Admission:
    """What a verb's checks and intent see when a request to start it arrives.

    ``node`` is as read in the request's transaction (``session``); checks
    read more through ``session`` but never write.
    """

    session: Session
    node: Node
    request: FlowRequest
    drivers: DriverRegistry
    settings: ConductorSettings


Check = Callable[[Admission], None]
"""Refuses a request (raises a ``RequestError``) the flow could not carry out."""


@dataclass(frozen=True)
class Intent:
    """What a verb writes together with its transition."""

    changes: Mapping[str, Any] = field(default_factory=dict)
    """Node columns."""
    progress: FlowProgress | None = None
    """The flow progress the node starts the flow with; ``None`` keeps the one it has."""
    writes: Callable[[Session], None] | None = None
    """Other records the verb writes, after the transition and in its transaction."""


IntentOf = Callable[[Admission], Intent]


@dataclass(frozen=True)
class Verb:
    """An API verb that starts (or restarts) a flow."""

    name: str
    since: tuple[int, int] = (1, 1)
    """The API microversion that introduced the verb."""
    fields: frozenset[RequestField] = frozenset()
    """Request fields the verb takes; any other given field is refused."""
    requires: RequestField | None = None
    """A field that must be given and not empty."""
    guards: tuple[Check, ...] = ()
    """Checks of the node itself, made before the state table is consulted."""
    checks: tuple[Check, ...] = ()
    """Checks made once the state table allows the verb."""
    intent: IntentOf | None = None
    clears_last_error: bool = True


@dataclass(frozen=True)
class FlowState:
    """What happens to a node in one busy state of a flow."""

    hook: Hook | None = None
    """What the conductor does here; ``None``: it waits for someone else (agent, operator)."""
    agent_may_look_up: bool = False
    """The ramdisk agent may be running and look the node up."""
    agent_continues: bool = False
    """An agent heartbeat queues a check (the flow waits for the agent's report)."""
    power_changes_allowed: bool = False
    """Operators may change power (the flow does not depend on it just now)."""
    power_refusal_ignores_lock: bool = False
    """A power request is refused here (400) even while the node is locked: Ironic's
    answer during cleaning, where a 409 would send clients into a retry loop."""
    abort_since: tuple[int, int] | None = None
    """The API microversion from which ``abort`` is accepted here, when later than the verb's."""


@dataclass(frozen=True)
class FlowSpec:
    """One provision flow, declared once."""

    name: str
    verbs: tuple[Verb, ...]
    states: Mapping[str, FlowState]
    step_flow: StepFlow | None = None
    """Set for the flows that run a plan of steps (``stepflow``)."""
    timeout_setting: str | None = None
    """The conductor setting bounding how long the flow waits (an agent, a step)."""
    on_abort: Hook | None = None
    """Run when the operator aborts the flow while no step runs (cleaning stops a
    ramdisk that is still booting); it records, rather than raises, what fails."""
    failure_state: str | None = None
    """The state the flow fails into, when ``after_abort`` acts there too."""
    after_abort: Hook | None = None
    """Takes the node on from an abort instead of leaving it in the failure state: run
    after an abort in a wait or hold state, and for ``abort`` in ``failure_state``
    (servicing returns the node to its instance and to ``active``, as Ironic does).
    It makes the node's last transition itself."""
    on_fail: Callable[[NodeTask, str], None] | None = None
    """Run when the flow fails for a reason no step reported (an unexpected error, a
    request given up on), before the ``fail`` transition, with the message."""

    def timeout(self, settings: ConductorSettings) -> float:
        """The flow's wait bound in seconds, read from the conductor's settings."""
        if self.timeout_setting is None:
            raise ValueError(f"the {self.name} flow declares no timeout")
        return float(getattr(settings, self.timeout_setting))


StateKind = Literal["busy", "stable", "failure"]


@dataclass(frozen=True)
class DetachedFlow:
    """Work a conductor runs without holding a node: one frozen declaration per kind."""

    name: str
    work_kind: str
    """The work items' kind (one item per piece of work, de-duplicated)."""
    states: Mapping[str, StateKind]
    """The states of what the flow works on (an allocation's, not a node's)."""
    run: Callable[[ConductorContext, queue.ClaimedItem], bool | None]
    """Run an item: ``True`` done, ``False`` try again shortly, ``None`` the item is
    unreadable (it names nothing to work on) and goes to the dead letters."""
    let_go: Callable[[ConductorContext, queue.ClaimedItem], None]
    """After ``run`` broke unexpectedly: give up this conductor's claim, for anyone to take."""
    give_up: Callable[[ConductorContext, queue.ClaimedItem, str], None]
    """The item is dead-lettered: leave what it was for in a failure state, not waiting."""
    resume: Callable[[ConductorContext], int]
    """At start-up: queue again what this conductor was working on when it stopped."""
    adopt: Callable[[ConductorContext], int]
    """Take over what dead conductors were working on; returns how many."""
    adopt_interval_setting: str
    """The conductor setting: seconds between adoptions (0 turns them off)."""

    def adopt_interval(self, settings: ConductorSettings) -> float:
        return float(getattr(settings, self.adopt_interval_setting))
