"""Every provision flow, and the state sets derived from their declarations.

A flow's states and transitions are in ``states``; its module (hooks and
``SPEC``) is listed here. The
sets below are what other code asks ("may the agent look this node up?",
"does a heartbeat continue its flow?", "may an operator change power now?");
they are computed from the specs so no hand-written copy can drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from metalforge.conductor.flows import (
    adoption,
    allocation,
    cleaning,
    deploying,
    inspection,
    rescue,
    servicing,
    undeploy,
    verify,
)
from metalforge.conductor.flows.spec import DetachedFlow, FlowSpec, FlowState, Hook, Verb
from metalforge.conductor.stepflow import StepFlow

SPECS: tuple[FlowSpec, ...] = (
    verify.SPEC,
    cleaning.SPEC,
    deploying.SPEC,
    undeploy.SPEC,
    inspection.SPEC,
    adoption.SPEC,
    rescue.SPEC,
    servicing.SPEC,
)


def _index() -> tuple[dict[str, FlowSpec], dict[str, FlowState], dict[str, tuple[FlowSpec, Verb]]]:
    flow_of: dict[str, FlowSpec] = {}
    state_of: dict[str, FlowState] = {}
    verbs: dict[str, tuple[FlowSpec, Verb]] = {}
    for spec in SPECS:
        for name, declared in spec.states.items():
            if name in flow_of:
                raise ValueError(
                    f"state {name!r} is declared by {flow_of[name].name} and {spec.name}"
                )
            flow_of[name], state_of[name] = spec, declared
        for verb in spec.verbs:
            if verb.name in verbs:
                raise ValueError(f"verb {verb.name!r} starts two flows")
            verbs[verb.name] = (spec, verb)
    return flow_of, state_of, verbs


_FLOW_OF, _STATE_OF, _VERBS = _index()

VERBS: Mapping[str, tuple[FlowSpec, Verb]] = MappingProxyType(_VERBS)
"""Each flow-starting verb, with its flow."""

HOOKS: Mapping[str, Hook] = MappingProxyType(
    {name: s.hook for name, s in _STATE_OF.items() if s.hook is not None}
)
"""States in which a conductor has work to do; in the others a node waits for someone else."""
STEP_FLOW_OF_STATE: Mapping[str, StepFlow] = MappingProxyType(
    {name: spec.step_flow for name, spec in _FLOW_OF.items() if spec.step_flow is not None}
)
"""The states of the flows that run a plan of steps (``stepflow``)."""
LOOKUP_STATES: frozenset[str] = frozenset(n for n, s in _STATE_OF.items() if s.agent_may_look_up)
"""States in which a node may be booting the agent; lookups of other nodes get 404."""
AGENT_WAKE_STATES: frozenset[str] = frozenset(n for n, s in _STATE_OF.items() if s.agent_continues)
"""States whose flow continues when the agent reports: a heartbeat queues a check."""
POWER_BLOCKED_STATES: frozenset[str] = frozenset(
    n for n, s in _STATE_OF.items() if not s.power_changes_allowed
)
"""States in which an operator's power request is refused: the flow drives the power."""
POWER_REFUSED_WHILE_LOCKED: frozenset[str] = frozenset(
    n for n, s in _STATE_OF.items() if s.power_refusal_ignores_lock
)
"""Power-blocked states whose refusal comes before the lock check (400, never 409)."""
ABORT_SINCE: Mapping[str, tuple[int, int]] = MappingProxyType(
    {n: s.abort_since for n, s in _STATE_OF.items() if s.abort_since is not None}
)
"""States where ``abort`` needs a later API microversion than the verb itself."""


def flow_of(state: str) -> FlowSpec | None:
    return _FLOW_OF.get(state)


AFTER_ABORT_FROM: Mapping[str, Hook] = MappingProxyType(
    {
        spec.failure_state: spec.after_abort
        for spec in SPECS
        if spec.failure_state is not None and spec.after_abort is not None
    }
)
"""Failure states an ``abort`` leaves through its flow's ``after_abort``."""


DETACHED: Mapping[str, DetachedFlow] = MappingProxyType(
    {flow.work_kind: flow for flow in (allocation.SPEC,)}
)
"""The flows a conductor runs without holding a node, by work kind (allocation matching)."""
