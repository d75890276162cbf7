"""The flow specs, and the state sets derived from them, checked state by state.

The expected tables below are the rules as Ironic's clients see them: where
the ramdisk agent may look a node up, where its heartbeat continues a flow,
where an operator may change power. Every busy state is listed, so a flow
added without saying how it treats the agent and power fails here.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, get_args

import pytest
from sqlalchemy import text

from metalforge import states
from metalforge.api import node_view
from metalforge.conductor import node_settings, node_work, stepflow, vendor, virtual_media
from metalforge.conductor.flows import catalog, inspection_events, request_fields
from metalforge.conductor.flows.spec import FlowRequest
from metalforge.conductor.node_work import BY_KIND as NODE_WORK
from metalforge.conductor.work import NodeWork, NoPayload, PayloadError
from metalforge.config import ConductorSettings
from metalforge.db import agent_sessions
from metalforge.db.engine import Database
from metalforge.db.flow_progress import StepKind
from metalforge.db.models import STEP_COLUMNS, Node
from metalforge.drivers.agent import deploy as agent_deploy
from metalforge.drivers.base import StepFailed
from metalforge.redaction import mask_document
from metalforge.services import node_fields, provisioning

# state: (agent may look up, agent heartbeat continues the flow, power requests refused)
EXPECTED: dict[str, tuple[bool, bool, bool]] = {
    states.VERIFYING: (False, False, True),
    states.INSPECTING: (True, False, True),
    states.INSPECT_WAIT: (True, False, False),
    states.CLEANING: (True, False, True),
    states.CLEAN_WAIT: (True, True, True),
    states.CLEAN_HOLD: (False, False, False),
    states.DEPLOYING: (True, False, True),
    states.DEPLOY_WAIT: (True, True, False),
    states.DEPLOY_HOLD: (False, False, False),
    states.DELETING: (False, False, True),
    states.ADOPTING: (False, False, True),
    states.RESCUING: (True, False, True),
    states.RESCUE_WAIT: (True, True, False),
    states.UNRESCUING: (False, False, True),
    states.SERVICING: (True, False, True),
    states.SERVICE_WAIT: (True, True, False),
    states.SERVICE_HOLD: (False, False, False),
}


def test_every_busy_state_is_in_the_expected_table() -> None:
    assert set(EXPECTED) == set(states.BUSY_STATES)


@pytest.mark.parametrize("name", sorted(states.STATES))
def test_each_state_belongs_to_one_flow_exactly_when_it_is_busy(name: str) -> None:
    flow = catalog.flow_of(name)
    if states.STATES[name].busy:
        assert flow is not None, f"no flow declares the busy state {name!r}"
    else:
        assert flow is None, f"{flow.name if flow else ''} declares the resting state {name!r}"


@pytest.mark.parametrize("name", sorted(states.STATES))
def test_derived_sets_state_by_state(name: str) -> None:
    look_up, continues, power_blocked = EXPECTED.get(name, (False, False, False))
    assert (name in catalog.LOOKUP_STATES) is look_up
    assert (name in catalog.AGENT_WAKE_STATES) is continues
    assert (name in catalog.POWER_BLOCKED_STATES) is power_blocked


def test_only_cleaning_refuses_power_before_looking_at_the_lock() -> None:
    assert {states.CLEANING, states.CLEAN_WAIT} == catalog.POWER_REFUSED_WHILE_LOCKED
    assert catalog.POWER_REFUSED_WHILE_LOCKED <= catalog.POWER_BLOCKED_STATES


@pytest.mark.parametrize("name", sorted(states.BUSY_STATES))
def test_hooks_where_a_conductor_acts(name: str) -> None:
    """Hold states wait for the operator; other busy states that do not wait need a hook."""
    if name in states.HOLD_STATES:
        assert name not in catalog.HOOKS
    elif name not in states.WAIT_STATES:
        assert name in catalog.HOOKS
    if name in catalog.AGENT_WAKE_STATES:
        assert name in catalog.HOOKS
        assert name in states.WAIT_STATES


def test_every_flow_verb_leads_into_its_own_flow() -> None:
    """A verb's transitions into a busy state land in the flow that declares the verb."""
    for transition in states.TRANSITIONS:
        found = catalog.VERBS.get(transition.event)
        if found is None or transition.target == states.GOAL:
            continue
        if states.STATES[transition.target].busy:
            assert catalog.flow_of(transition.target) is found[0], transition


def test_every_api_verb_is_a_flow_verb_or_a_control_verb() -> None:
    assert set(states.VERBS) == set(catalog.VERBS) | set(provisioning.CONTROL_VERBS)


def test_timeouts_name_real_settings_and_step_flows_have_one() -> None:
    settings = ConductorSettings()
    for spec in catalog.SPECS:
        if spec.step_flow is not None:
            assert spec.timeout_setting is not None, spec.name
        if spec.timeout_setting is not None:
            assert spec.timeout(settings) > 0


def test_every_optional_request_field_is_declared_once_with_its_messages() -> None:
    """A ``FlowRequest`` field without a declaration would be accepted by every verb."""
    always = {"verb", "target", "given", "manage_boot", "steps"}
    request = {f.name for f in dataclasses.fields(FlowRequest)} - always
    declared = [field.name for field in request_fields.ALL if not field.holds_steps]
    assert sorted(declared) == sorted(request)
    # Every step kind's request field holds steps (``FlowRequest.steps``, keyed by it).
    holding = {field.name for field in request_fields.ALL if field.holds_steps}
    assert holding == {f"{kind}_steps" for kind in get_args(StepKind)}
    for field in request_fields.ALL:
        assert field.misplaced, field.name
        assert field.since is not None or not field.since_checked_for_every_verb, field.name


def test_verb_fields_are_declared_and_a_required_one_has_its_message() -> None:
    verbs = [verb for spec in catalog.SPECS for verb in spec.verbs]
    for verb in [*verbs, *provisioning.CONTROL_VERBS.values()]:
        assert verb.fields <= set(request_fields.ALL), verb.name
        if verb.requires is not None:
            assert verb.requires in verb.fields, verb.name
            assert verb.requires.missing is not None, verb.name
    required = {verb.requires for verb in verbs if verb.requires is not None}
    assert {f for f in request_fields.ALL if f.missing is not None} == required


def test_allocation_matching_is_declared_and_its_takeover_setting_is_real() -> None:
    flow = catalog.DETACHED["allocation"]
    assert flow.work_kind == "allocation"
    assert flow.work_kind not in NODE_WORK, "one kind, one way to run it"
    assert dict(flow.states) == {"allocating": "busy", "active": "stable", "error": "failure"}
    assert flow.adopt_interval(ConductorSettings()) > 0
    assert flow.adopt_interval(ConductorSettings(allocation_takeover_interval=0)) == 0


def test_each_step_flow_belongs_to_one_flow_spec() -> None:
    kinds = [spec.step_flow for spec in catalog.SPECS if spec.step_flow is not None]
    assert sorted(kind.name for kind in kinds) == sorted(stepflow.BY_NAME)
    for kind in kinds:
        assert stepflow.BY_NAME[kind.name] is kind


@pytest.mark.parametrize("kind", list(stepflow.BY_NAME.values()), ids=lambda k: k.name)
def test_a_step_flow_shows_its_step_masked_and_announced(
    kind: stepflow.StepFlow, sqlite_db: Database
) -> None:
    """The running step is a node column, a field of the node's view (with its step
    arguments masked) and a change the node's event trigger reports."""
    column = kind.column.key
    assert column in Node.__table__.columns
    assert column in node_fields.NODE_FIELDS
    assert node_view._COMPUTED[column] is mask_document
    assert kind.name in get_args(StepKind)
    assert column in STEP_COLUMNS, "masked and shown by the dashboard as a running step"
    with sqlite_db.read() as session:
        triggers = session.execute(
            text("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'nodes'")
        ).scalars()
        assert any(f"OLD.{column}" in sql for sql in triggers), column


_SAMPLE_PAYLOADS: dict[type[Any], Any] = {
    NoPayload: NoPayload(),
    node_work.PowerChange: node_work.PowerChange("power on", 30),
    node_settings.ConsoleChange: node_settings.ConsoleChange(True),
    node_settings.BootModeChange: node_settings.BootModeChange("uefi"),
    node_settings.SecureBootChange: node_settings.SecureBootChange(False),
    vendor.VendorCall: vendor.VendorCall("send_raw", "POST", {"raw_bytes": "0x00 0x01"}),
    inspection_events.InspectionEvent: inspection_events.InspectionEvent("continue", 3),
    agent_sessions.IdleCheck: agent_sessions.IdleCheck("2026-12-06T05:18:28.162132+00:00"),
    virtual_media.AttachMedia: virtual_media.AttachMedia(
        "cdrom", "https://images.example.com/x.iso", "local", "heidi (project p-lessee)"
    ),
    virtual_media.EjectMedia: virtual_media.EjectMedia(("cdrom", "floppy"), None),
}
"""One payload of each work kind's type: a new kind needs one here (docs/extending.md)."""


@pytest.mark.parametrize("work", list(NODE_WORK.values()), ids=lambda w: w.kind)
def test_each_node_work_kind_reads_back_what_it_queues(work: NodeWork[Any]) -> None:
    assert NODE_WORK[work.kind] is work
    assert dataclasses.is_dataclass(work.payload_type)
    assert work.payload_type.__dataclass_params__.frozen  # type: ignore[attr-defined]
    sample = _SAMPLE_PAYLOADS[work.payload_type]
    stored = json.loads(json.dumps(work.payload(sample)))  # as the queue's column keeps it
    assert work.read(stored) == sample
    if stored:  # a field of the wrong type is refused, never coerced
        with pytest.raises(PayloadError):
            work.read({k: [] for k in stored})


def test_no_work_kind_is_both_a_node_work_and_a_detached_flow() -> None:
    assert not set(NODE_WORK) & set(catalog.DETACHED)


@pytest.mark.parametrize("kind", get_args(StepKind))
def test_an_agent_commands_prefix_names_its_step_kind(kind: StepKind) -> None:
    assert agent_deploy._step_kind(f"{kind}.execute_{kind}_step") == kind


def test_an_agent_command_of_no_step_kind_is_refused_not_read_as_cleaning() -> None:
    with pytest.raises(StepFailed, match="runs no kind of step"):
        agent_deploy._step_kind("standby.prepare_image")


def test_every_step_kind_has_its_running_step_column_and_only_those_are() -> None:
    assert tuple(f"{kind}_step" for kind in get_args(StepKind)) == STEP_COLUMNS
