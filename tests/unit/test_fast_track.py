"""Fast track's decisions (``drivers.agent.fast_track``) on a task whose session is in memory.

Whether a flow uses the agent an earlier one kept, boots a new one, or
replaces a kept one that cannot serve: decided from the session (kept when,
heard when), the node's setting and the power state the BMC reports. The
power and boot interfaces are fake-hardware's; the real agent's side is in
``tests/e2e/test_fast_track.py``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest

from metalforge.config import ConductorSettings
from metalforge.db import bios_settings, firmware_components
from metalforge.db.agent_sessions import AgentSessionInfo
from metalforge.db.flow_progress import NO_FLOW, FlowProgress
from metalforge.db.models import Node
from metalforge.drivers.agent import fast_track
from metalforge.drivers.agent.deploy import AgentDeploy
from metalforge.drivers.base import POWER_OFF, POWER_ON, DriverError, Interface
from metalforge.drivers.fake import FakeBoot, FakePower

CLOSED_PORT_URL = "http://127.0.0.1:9"
"""An agent address nothing listens on: the kept agent died."""


class SessionTask:
    """A ``DriverTask`` whose agent session lives in memory."""

    def __init__(self, driver_info: dict[str, Any] | None = None, **conductor: Any) -> None:
        self.node = Node(
            uuid="1be26c0b-03f2-4d2d-ae87-c02d7f33c123",
            driver="fake-hardware",
            provision_state="cleaning",
            driver_info=driver_info or {},
            driver_internal_info={},
            instance_info={},
            properties={},
            power_state=POWER_ON,
        )
        self.settings = ConductorSettings(**conductor)
        self.progress: FlowProgress = NO_FLOW
        self.session: AgentSessionInfo | None = None
        self.events: list[str] = []
        self.begun = 0
        self._interfaces: dict[str, Interface] = {"power": FakePower(), "boot": FakeBoot()}

    def sleep(self, seconds: float) -> None:
        return None

    def record(self, event_type: str, event: str, severity: str = "INFO") -> None:
        self.events.append(event)

    def now(self) -> float:
        return dt.datetime.now(dt.UTC).timestamp()

    def interface(self, family: str) -> Interface:
        return self._interfaces[family]

    def agent_session(self) -> AgentSessionInfo | None:
        return self.session

    def begin_agent_session(self) -> None:
        self.begun += 1
        self.session = _session(booted_ago=0, heard_ago=None, kept_ago=None)

    def end_agent_session(self) -> None:
        self.session = None

    def keep_agent_session(self) -> bool:
        if self.session is None:
            return False
        self.session = _session(booted_ago=60, heard_ago=1, kept_ago=0)
        return True

    def store_bios_settings(self, settings: Sequence[bios_settings.Setting]) -> None:
        raise AssertionError("not used")

    def store_firmware(self, reported: Sequence[firmware_components.Reported]) -> None:
        raise AssertionError("not used")


def _session(
    *, booted_ago: float, heard_ago: float | None, kept_ago: float | None
) -> AgentSessionInfo:
    now = dt.datetime.now(dt.UTC)

    def ago(seconds: float | None) -> dt.datetime | None:
        return None if seconds is None else now - dt.timedelta(seconds=seconds)

    return AgentSessionInfo(
        node_id=1,
        booted_at=ago(booted_ago),
        token="t" if heard_ago is not None else None,
        agent_url=CLOSED_PORT_URL if heard_ago is not None else None,
        agent_version="10.0.0",
        verify_ca=None,
        last_heartbeat_at=ago(heard_ago),
        kept_since=ago(kept_ago),
    )


@pytest.mark.parametrize(
    ("value", "default", "expected"),
    [
        (None, False, False),
        (None, True, True),
        ("true", False, True),
        ("Yes", False, True),
        (True, False, True),
        ("0", True, False),
        ("off", True, False),
        (False, True, False),
    ],
)
def test_the_nodes_setting_overrides_the_conductors(
    value: Any, default: bool, expected: bool
) -> None:
    info = {} if value is None else {"fast_track": value}
    task = SessionTask(info, fast_track=default)
    assert fast_track.enabled(task) is expected


@pytest.mark.parametrize("value", ["maybe", "", 2, ["true"]])
def test_a_setting_neither_true_nor_false_is_refused_by_validation(value: Any) -> None:
    task = SessionTask({"fast_track": value})
    with pytest.raises(fast_track.FastTrackInvalid, match="must be true or false"):
        AgentDeploy().validate(task)


@pytest.mark.parametrize(
    ("session", "power", "why"),
    [
        (None, POWER_ON, "no agent runs"),
        (_session(booted_ago=60, heard_ago=1, kept_ago=None), POWER_ON, "not kept by a flow"),
        (_session(booted_ago=900, heard_ago=1, kept_ago=400), POWER_ON, "idle past the timeout"),
        (_session(booted_ago=90, heard_ago=20, kept_ago=30), POWER_ON, "silent past heartbeats"),
        (_session(booted_ago=90, heard_ago=None, kept_ago=20), POWER_ON, "never looked up"),
        (_session(booted_ago=60, heard_ago=1, kept_ago=5), POWER_OFF, "the node is off"),
    ],
)
def test_an_agent_that_cannot_serve_is_not_used_a_new_one_boots(
    session: AgentSessionInfo | None, power: str, why: str
) -> None:
    task = SessionTask({"fast_track": "true"}, agent_heartbeat_timeout=10)
    task.session = session
    task.node.power_state = power
    assert fast_track.start(task, "clean", "cleaning") == "wait", why
    assert task.begun == 1, why
    assert task.events[-1] == "booting the ramdisk agent for cleaning"


def test_without_fast_track_a_kept_agent_is_not_used() -> None:
    task = SessionTask({"fast_track": "false"})
    task.session = _session(booted_ago=60, heard_ago=1, kept_ago=5)
    assert fast_track.start(task, "deploy", "deployment") == "wait"
    assert task.begun == 1


def test_a_kept_agent_that_does_not_answer_is_replaced_by_a_fresh_boot() -> None:
    task = SessionTask({"fast_track": "true"}, agent_command_timeout=2.0)
    task.session = _session(booted_ago=60, heard_ago=1, kept_ago=5)
    assert fast_track.start(task, "clean", "cleaning") == "wait"
    assert task.begun == 1, "the dead agent's session ended and a new boot began"
    assert "using the agent kept running for cleaning (fast track): no reboot" in task.events
    assert any(e.startswith("the kept agent cannot serve") for e in task.events), task.events
    assert task.events[-1] == "booting the ramdisk agent for cleaning"


def test_a_kept_agent_not_yet_heard_is_waited_for_within_the_heartbeat_timeout() -> None:
    task = SessionTask({"fast_track": "true"}, agent_heartbeat_timeout=10)
    task.session = _session(booted_ago=30, heard_ago=None, kept_ago=2)
    assert fast_track.start(task, "clean", "cleaning") == "wait"
    assert task.begun == 0, "an agent kept right after its report is about to look up"
    task.session = _session(booted_ago=40, heard_ago=None, kept_ago=12)
    assert fast_track.agent_ready(task, "clean", "cleaning") == "wait"
    assert task.begun == 1, "silent past the heartbeat timeout: replaced"


def test_an_agent_booted_for_the_flow_that_fails_fails_the_flow() -> None:
    task = SessionTask({"fast_track": "true"}, agent_command_timeout=2.0)
    task.session = _session(booted_ago=5, heard_ago=1, kept_ago=None)
    with pytest.raises(DriverError):
        fast_track.agent_ready(task, "clean", "cleaning")
    assert task.begun == 0


def test_keeping_leaves_the_node_on_only_with_fast_track() -> None:
    task = SessionTask({"fast_track": "true"})
    assert fast_track.keep(task) is False, "no agent session to keep"
    task.session = _session(booted_ago=60, heard_ago=1, kept_ago=None)
    assert fast_track.keep(task) is True
    assert task.session is not None
    assert task.session.kept_since is not None
    assert task.events[-1].startswith("the agent stays up for the next flow (fast track)")
    off = SessionTask()
    off.session = _session(booted_ago=60, heard_ago=1, kept_ago=None)
    assert fast_track.keep(off) is False
    AgentDeploy().finish_cleaning(off)
    assert off.node.power_state == POWER_OFF
    assert off.session is None


def test_a_clean_that_succeeds_keeps_the_agent_and_an_aborted_one_stops_it() -> None:
    kept = SessionTask({"fast_track": "true"})
    kept.session = _session(booted_ago=60, heard_ago=1, kept_ago=None)
    AgentDeploy().finish_cleaning(kept)
    assert kept.node.power_state == POWER_ON
    assert kept.session is not None
    assert kept.session.kept_since is not None
    aborted = SessionTask({"fast_track": "true"})
    aborted.session = _session(booted_ago=60, heard_ago=1, kept_ago=None)
    AgentDeploy().tear_down_cleaning(aborted)
    assert aborted.node.power_state == POWER_OFF
    assert aborted.session is None
