"""Cleaning through the API: the step catalogue, manual and automated cleaning, failures.

Flows whose outcome depends on the database (locks, waits, aborts) run on
SQLite and PostgreSQL; the shape of the catalogue and of refusals on SQLite.
Steps come from ``fake-hardware``; ``fake_step_delay`` makes them slow enough
to watch, abort or time out, ``fake_fail_steps`` makes one fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from metalforge.conductor import stepflow
from metalforge.db.engine import Database
from metalforge.db.flow_progress import StepKind
from metalforge.drivers.base import DriverTask, StepsNotKnown
from metalforge.drivers.fake import FAKE_HARDWARE, FakeDeploy
from metalforge.drivers.hardware import DriverRegistry, HardwareType
from metalforge.drivers.step_declarations import StepDecl
from metalforge.serving import build_api
from metalforge.startup import build_conductor
from tests.support.api import (
    LATEST,
    bios_of,
    create_node,
    error_text,
    get_node,
    provision,
    version,
    wait_for_state,
    wait_until,
)
from tests.support.stack import AdjustableClock, Stack, start_stack
from tests.support.stack import test_settings as stack_settings

RAID = {
    "logical_disks": [
        {"raid_level": "1", "size_gb": 100, "is_root_volume": True},
        {"raid_level": "5", "size_gb": "MAX", "volume_name": "data"},
    ]
}
ALL_STEPS = [
    ("deploy.erase_devices_metadata", 99),
    ("deploy.erase_devices", 10),
    ("management.reset_bios", 0),
    ("bios.apply_configuration", 0),
    ("raid.create_configuration", 0),
    ("raid.delete_configuration", 0),
    ("firmware.update", 0),
]
"""fake-hardware's clean steps in plan order: priority, then interface order, then name."""

StackFactory = Callable[..., Stack]


@pytest.fixture
def configured(db_url: str) -> Iterator[StackFactory]:
    """Start a stack with conductor settings of the test's choosing, on each engine."""
    started: list[Stack] = []

    def start(clock: AdjustableClock | None = None, **conductor: Any) -> Stack:
        stack = start_stack(stack_settings(db_url, **conductor), clock=clock)
        started.append(stack)
        return stack

    yield start
    for stack in started:
        stack.stop()


@pytest.fixture
def sqlite_configured(sqlite_url: str) -> Iterator[StackFactory]:
    started: list[Stack] = []

    def start(**conductor: Any) -> Stack:
        stack = start_stack(stack_settings(sqlite_url, **conductor))
        started.append(stack)
        return stack

    yield start
    for stack in started:
        stack.stop()


# -- helpers -------------------------------------------------------------------


def _manageable(client: TestClient, **fields: Any) -> dict[str, Any]:
    node = create_node(client, **fields)
    assert provision(client, node["uuid"], "manage").status_code == 202
    return wait_for_state(client, node["uuid"], "manageable")


def _clean(client: TestClient, ident: str, *clean_steps: dict[str, Any]) -> Any:
    return provision(client, ident, "clean", clean_steps=list(clean_steps))


def _step(name: str, **args: Any) -> dict[str, Any]:
    interface, _, step = name.partition(".")
    body: dict[str, Any] = {"interface": interface, "step": step}
    if args:
        body["args"] = args
    return body


def _catalogue(client: TestClient, ident: str, query: str = "") -> list[tuple[str, int]]:
    response = client.get(f"/v1/nodes/{ident}/cleaning/steps{query}", headers=LATEST)
    assert response.status_code == 200, response.text
    return [(f"{s['interface']}.{s['step']}", s["priority"]) for s in response.json()["steps"]]


def _history(client: TestClient, ident: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/nodes/{ident}/history?detail=true", headers=LATEST)
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["history"]
    return events


def _steps_logged(client: TestClient, ident: str, word: str) -> list[str]:
    """Clean steps that logged ``word`` (``started``/``finished``), in history order."""
    names = []
    for event in _history(client, ident):
        name, _, rest = event["event"].partition(" ")
        if event["event_type"] == "clean_step" and rest.startswith(word):
            names.append(name)
    return names


def _set_raid(client: TestClient, ident: str, config: dict[str, Any]) -> Any:
    return client.put(f"/v1/nodes/{ident}/states/raid", json=config, headers=LATEST)


# -- the catalogue -------------------------------------------------------------


def test_catalogue_lists_every_step_highest_priority_first(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, name="cat-1")
    assert _catalogue(client, node["uuid"]) == ALL_STEPS
    assert _catalogue(client, "cat-1") == ALL_STEPS
    body = client.get("/v1/nodes/cat-1/cleaning/steps", headers=LATEST).json()
    by_name = {f"{s['interface']}.{s['step']}": s for s in body["steps"]}
    assert by_name["deploy.erase_devices"] == {
        "interface": "deploy",
        "step": "erase_devices",
        "priority": 10,
        "abortable": True,
        "requires_ramdisk": True,
        "args": [],
    }
    assert by_name["raid.create_configuration"]["abortable"] is False
    assert by_name["raid.create_configuration"]["requires_ramdisk"] is False
    assert [a["name"] for a in by_name["raid.create_configuration"]["args"]] == [
        "create_root_volume",
        "create_nonroot_volumes",
    ]
    (settings,) = by_name["bios.apply_configuration"]["args"]
    assert settings["name"] == "settings"
    assert settings["required"] is True
    assert settings["description"]

    # min_priority=1 is the automated plan; 0 and below is everything.
    assert _catalogue(client, "cat-1", "?min_priority=1") == ALL_STEPS[:2]
    assert _catalogue(client, "cat-1", "?min_priority=50") == ALL_STEPS[:1]
    assert _catalogue(client, "cat-1", "?min_priority=0") == ALL_STEPS
    assert _catalogue(client, "cat-1", "?min_priority=1000") == []


def test_catalogue_refusals_use_ironic_error_format(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    create_node(client, name="cat-2")
    for query, status, text in (
        ("?min_priority=high", 400, "min_priority"),
        ("?priority=1", 400, "Unexpected arguments: priority"),
    ):
        response = client.get(f"/v1/nodes/cat-2/cleaning/steps{query}", headers=LATEST)
        assert response.status_code == status, response.text
        assert text in error_text(response)
    missing = client.get("/v1/nodes/nope/cleaning/steps", headers=LATEST)
    assert missing.status_code == 404
    assert "nope could not be found" in error_text(missing)
    # Names need 1.5, as everywhere else; a UUID works at any version.
    assert client.get("/v1/nodes/cat-2/cleaning/steps", headers=version("1.1")).status_code == 404


def test_catalogue_applies_operator_overrides(sqlite_configured: StackFactory) -> None:
    stack = sqlite_configured(
        clean_step_priority_override=["deploy.erase_devices:0", "raid.create_configuration:20"]
    )
    client = stack.client
    node = _manageable(client, name="over-1")
    assert _catalogue(client, "over-1", "?min_priority=1") == [
        ("deploy.erase_devices_metadata", 99),
        ("raid.create_configuration", 20),
    ]
    assert ("deploy.erase_devices", 0) in _catalogue(client, "over-1")

    # The automated plan is the catalogue from priority 1 up, in the same order.
    assert _set_raid(client, "over-1", RAID).status_code == 204
    assert provision(client, "over-1", "provide").status_code == 202
    node = wait_for_state(client, node["uuid"], "available")
    assert _steps_logged(client, "over-1", "finished") == [
        "deploy.erase_devices_metadata",
        "raid.create_configuration",
    ]
    assert [d["raid_level"] for d in node["raid_config"]["logical_disks"]] == ["1", "5"]
    # A disabled step can still be asked for by name.
    assert provision(client, "over-1", "manage").status_code == 202
    wait_for_state(client, "over-1", "manageable")
    assert _clean(client, "over-1", _step("deploy.erase_devices")).status_code == 202
    wait_for_state(client, "over-1", "manageable")
    assert _steps_logged(client, "over-1", "finished")[-1] == "deploy.erase_devices"


def test_an_override_naming_no_step_is_reported_in_the_history(
    sqlite_configured: StackFactory,
) -> None:
    stack = sqlite_configured(
        clean_step_priority_override=["deploy.erase_disks:0"],
        deploy_step_priority_override=["raid.apply_config:10"],
    )
    client = stack.client
    node = _manageable(client, name="typo-1")
    assert provision(client, "typo-1", "provide").status_code == 202
    wait_for_state(client, node["uuid"], "available")
    assert provision(client, "typo-1", "active").status_code == 202
    wait_for_state(client, node["uuid"], "active")
    events = client.get("/v1/nodes/typo-1/history", headers=LATEST).json()["history"]
    warnings = [e["event"] for e in events if e["severity"] == "WARNING"]
    assert any("deploy.erase_disks" in w and "ignored" in w for w in warnings), warnings
    assert any("raid.apply_config" in w and "ignored" in w for w in warnings), warnings


def test_disable_ramdisk_runs_only_steps_that_need_no_ramdisk(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = _manageable(client, name="noram-1")
    bios = _step("management.reset_bios")
    response = provision(client, "noram-1", "clean", clean_steps=[bios], disable_ramdisk=True)
    assert response.status_code == 202, response.text
    wait_for_state(client, node["uuid"], "manageable")
    assert _steps_logged(client, "noram-1", "finished") == ["management.reset_bios"]

    erase = _step("deploy.erase_devices_metadata")
    response = provision(client, "noram-1", "clean", clean_steps=[erase], disable_ramdisk=True)
    assert response.status_code == 202, response.text
    failed = wait_for_state(client, node["uuid"], "clean failed")
    assert "deploy.erase_devices_metadata" in failed["last_error"]
    assert "disable_ramdisk" in failed["last_error"]


def test_a_manual_clean_of_steps_that_need_no_ramdisk_boots_none(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = _manageable(client, name="noram-2")
    bios = _step("management.reset_bios")
    assert provision(client, "noram-2", "clean", clean_steps=[bios]).status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    assert _steps_logged(client, "noram-2", "finished") == ["management.reset_bios"]
    events = client.get("/v1/nodes/noram-2/history", headers=LATEST).json()["history"]
    assert "no requested step needs the ramdisk; none is booted" in [e["event"] for e in events]

    # One step that needs the agent: the ramdisk boots for the whole clean.
    erase = _step("deploy.erase_devices_metadata")
    assert provision(client, "noram-2", "clean", clean_steps=[bios, erase]).status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    events = client.get("/v1/nodes/noram-2/history", headers=LATEST).json()["history"]
    skipped = [e for e in events if e["event"].startswith("no requested step needs the ramdisk")]
    assert len(skipped) == 1, "the second clean booted the ramdisk"


class _AgentLaterDeploy(FakeDeploy):
    """A deploy interface that learns its clean steps from an agent not booted yet."""

    name = "agent-later"

    def get_steps(self, task: DriverTask, kind: StepKind) -> list[StepDecl]:
        if kind != "clean":
            return super().get_steps(task, kind)
        retry = int(task.node.extra.get("retry_after", -1))
        raise StepsNotKnown("the agent has not reported its clean steps yet", retry_after=retry)


def test_catalogue_answers_202_while_steps_are_not_known(sqlite_url: str) -> None:
    settings = stack_settings(sqlite_url)
    db = Database(settings.database.url)
    db.upgrade()
    later = HardwareType(
        "later-hardware", {**FAKE_HARDWARE.supported, "deploy": (_AgentLaterDeploy,)}
    )
    registry = DriverRegistry([FAKE_HARDWARE, later])
    conductor = build_conductor(settings, db, registry)
    conductor.start()
    app = build_api(settings, db, registry, notify=conductor.ctx.waker.notify)
    try:
        with TestClient(app) as client:
            # Seed 002: 202, Retry-Request-After (-1: nobody knows when) and a message.
            unknown = _manageable(client, driver="later-hardware")
            response = client.get(f"/v1/nodes/{unknown['uuid']}/cleaning/steps", headers=LATEST)
            assert response.status_code == 202
            assert response.headers["Retry-Request-After"] == "-1"
            assert "not known yet" in response.json()["message"]
            assert "not reported its clean steps yet" in response.json()["message"]
            node = _manageable(client, driver="later-hardware", extra={"retry_after": 15})
            response = client.get(f"/v1/nodes/{node['uuid']}/cleaning/steps", headers=LATEST)
            assert response.status_code == 202
            assert response.headers["Retry-Request-After"] == "15"
            # The API cannot check steps it cannot list, so it accepts the request;
            # the conductor refuses to plan from a partial list.
            assert _clean(client, node["uuid"], _step("deploy.erase_devices")).status_code == 202
            node = wait_for_state(client, node["uuid"], "clean failed")
            assert "not reported its clean steps yet" in node["last_error"]
            assert _steps_logged(client, node["uuid"], "started") == []
    finally:
        conductor.stop()
        db.dispose()


# -- target RAID configuration -------------------------------------------------


def test_raid_config_is_validated_and_stored(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, name="raid-1")
    assert _set_raid(client, "raid-1", RAID).status_code == 204
    shown = client.get("/v1/nodes/raid-1/states", headers=LATEST).json()
    assert shown["target_raid_config"] == RAID
    assert shown["raid_config"] == {}
    assert get_node(client, "raid-1")["target_raid_config"] == RAID

    disk = {"raid_level": "1", "size_gb": 10}
    for bad, text in (
        ({"logical_disks": []}, "at least one logical disk"),
        ({"logical_disks": None}, "logical_disks must be a list"),
        ({"logical_disks": [{**disk, "raid_level": "7"}]}, "logical_disks[0]: raid_level '7'"),
        ({"logical_disks": [disk, {"raid_level": "0"}]}, "logical_disks[1] needs size_gb"),
        ({"logical_disks": [{**disk, "size_gb": 0}]}, "size_gb must be a positive integer"),
        ({"logical_disks": [{**disk, "size_gb": True}]}, "size_gb must be a positive integer"),
        ({"logical_disks": [{**disk, "colour": "red"}]}, "unknown key(s) colour"),
        ({"logical_disks": [{**disk, "disk_type": "tape"}]}, "disk_type must be one of"),
        ({"logical_disks": [{**disk, "physical_disks": ["sda"]}]}, "needs controller"),
        (
            {"logical_disks": [{**disk, "is_root_volume": True}] * 2},
            "only one logical disk may be the root volume",
        ),
        ({**RAID, "extra": 1}, "'extra' was unexpected"),
    ):
        response = _set_raid(client, "raid-1", bad)
        assert response.status_code == 400, (bad, response.text)
        assert text in error_text(response), (bad, error_text(response))
    assert get_node(client, "raid-1")["target_raid_config"] == RAID

    old = client.put("/v1/nodes/raid-1/states/raid", json=RAID, headers=version("1.11"))
    assert old.status_code == 406
    missing = client.put("/v1/nodes/nope/states/raid", json=RAID, headers=LATEST)
    assert missing.status_code == 404
    assert _set_raid(client, node["uuid"], {}).status_code == 204
    assert get_node(client, "raid-1")["target_raid_config"] == {}

    create_node(client, name="raid-none", raid_interface="no-raid")
    unsupported = _set_raid(client, "raid-none", RAID)
    assert unsupported.status_code == 404
    assert "no-raid" in error_text(unsupported)
    assert _set_raid(client, "raid-none", {}).status_code == 204


# -- manual cleaning -----------------------------------------------------------


def test_manual_clean_with_raid_steps_applies_the_target(stack: Stack) -> None:
    client = stack.client
    node = _manageable(client, name="manual-1")
    assert _set_raid(client, "manual-1", RAID).status_code == 204
    response = _clean(
        client,
        "manual-1",
        _step("raid.delete_configuration"),
        _step("raid.create_configuration", create_nonroot_volumes=False),
    )
    assert response.status_code == 202, response.text
    seen = get_node(client, "manual-1")
    assert (seen["provision_state"], seen["target_provision_state"]) in (
        ("cleaning", "manageable"),
        ("manageable", None),
    )
    node = wait_for_state(client, node["uuid"], "manageable")
    (root,) = node["raid_config"]["logical_disks"]
    assert root["is_root_volume"] is True
    assert root["size_gb"] == 100
    assert root["controller"] == "fake-raid-0"
    assert node["clean_step"] == {}
    assert node["last_error"] is None
    assert _steps_logged(client, "manual-1", "started") == [
        "raid.delete_configuration",
        "raid.create_configuration",
    ]
    finished = [
        e
        for e in _history(client, "manual-1")
        if e["event"].startswith("raid.create_configuration finished")
    ]
    assert finished[0]["duration_seconds"] is not None

    # Priority 0 steps stay available to manual cleaning, and again on demand.
    assert _clean(client, "manual-1", _step("raid.delete_configuration")).status_code == 202
    node = wait_for_state(client, "manual-1", "manageable")
    assert node["raid_config"] == {}


def test_manual_clean_refuses_what_cannot_run_naming_it(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = _manageable(client, name="refuse-1")
    before = len(_history(client, "refuse-1"))
    for steps, text in (
        ([_step("deploy.nope")], "deploy.nope"),
        ([_step("raid.delete_configuration"), _step("vendor.flash")], "vendor.flash"),
        ([{"interface": "firmware-ish", "step": "x"}], "'firmware-ish' is not a step interface"),
        ([_step("raid.delete_configuration", colour="red")], "colour"),
        ([_step("bios.apply_configuration")], "requires argument(s) settings"),
    ):
        response = _clean(client, "refuse-1", *steps)
        assert response.status_code == 400, (steps, response.text)
        assert text in error_text(response), (steps, error_text(response))
    empty = provision(client, "refuse-1", "clean")
    assert empty.status_code == 400
    assert '"clean_steps" is required' in error_text(empty)
    # Nothing ran and nothing changed.
    node = get_node(client, node["uuid"])
    assert (node["provision_state"], node["target_provision_state"]) == ("manageable", None)
    assert len(_history(client, "refuse-1")) == before


def test_clean_step_shows_the_running_step(stack: Stack) -> None:
    client = stack.client
    node = _manageable(client, driver_info={"fake_step_delay": 1.0})
    response = _clean(
        client,
        node["uuid"],
        _step("raid.delete_configuration"),
        _step("management.reset_bios"),
    )
    assert response.status_code == 202
    wait_for_state(client, node["uuid"], "cleaning")
    # A conductor holds the node during a synchronous step; like Ironic, a power
    # change is refused for the state (400) rather than waiting for the lock (409).
    power = client.put(
        f"/v1/nodes/{node['uuid']}/states/power", json={"target": "power on"}, headers=LATEST
    )
    assert power.status_code == 400, power.text
    assert "cleaning" in error_text(power)
    seen: list[str] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        current = get_node(client, node["uuid"])
        if current["provision_state"] == "manageable":
            break
        assert current["provision_state"] == "cleaning", current
        step = current["clean_step"]
        if step and (not seen or seen[-1] != step["step"]):
            assert step["interface"] in ("raid", "management")
            seen.append(step["step"])
        time.sleep(0.05)
    assert seen == ["delete_configuration", "reset_bios"]
    assert get_node(client, node["uuid"])["clean_step"] == {}


# -- automated cleaning --------------------------------------------------------


def test_provide_runs_automated_cleaning_in_priority_order(stack: Stack) -> None:
    client = stack.client
    node = _manageable(client, name="auto-1")
    assert provision(client, "auto-1", "provide").status_code == 202
    node = wait_for_state(client, node["uuid"], "available")
    assert node["clean_step"] == {}
    assert _steps_logged(client, "auto-1", "started") == [
        "deploy.erase_devices_metadata",
        "deploy.erase_devices",
    ]
    events = _history(client, "auto-1")
    plan = [e["event"] for e in events if e["event_type"] == "clean_plan"]
    assert plan == ["clean plan: deploy.erase_devices_metadata(99), deploy.erase_devices(10)"]
    durations = [
        e["duration_seconds"]
        for e in events
        if e["event_type"] == "clean_step" and "finished" in e["event"]
    ]
    assert len(durations) == 2
    assert all(d is not None and d >= 0 for d in durations)


@pytest.mark.parametrize(
    ("conductor_setting", "node_field", "cleans"),
    [(True, None, True), (False, None, False), (False, True, True), (True, False, False)],
)
def test_automated_clean_switch_and_per_node_override(
    sqlite_configured: StackFactory, conductor_setting: bool, node_field: bool | None, cleans: bool
) -> None:
    client = sqlite_configured(automated_clean=conductor_setting).client
    fields = {} if node_field is None else {"automated_clean": node_field}
    node = _manageable(client, **fields)
    assert provision(client, node["uuid"], "provide").status_code == 202
    wait_for_state(client, node["uuid"], "available")
    ran = _steps_logged(client, node["uuid"], "finished")
    assert ran == (["deploy.erase_devices_metadata", "deploy.erase_devices"] if cleans else [])
    if not cleans:
        texts = [e["event"] for e in _history(client, node["uuid"])]
        assert "automated cleaning is disabled; no steps run" in texts


# -- the node's steps change during cleaning ----------------------------------------


@pytest.mark.parametrize("delay", [0, 0.2], ids=["as-it-starts", "while-it-waits"])
def test_automated_cleaning_starts_again_when_the_steps_change(stack: Stack, delay: float) -> None:
    """Seed 000: an agent updated during cleaning (new hardware managers) offers other
    steps; automated cleaning plans again and runs from the start, not ``clean failed``."""
    client = stack.client
    info = {"fake_steps_change": "deploy.erase_devices", "fake_step_delay": delay}
    node = _manageable(client, name="changed-1", driver_info=info)
    assert provision(client, "changed-1", "provide").status_code == 202
    node = wait_for_state(client, node["uuid"], "available")
    assert node["maintenance"] is False
    assert node["last_error"] is None
    assert node["driver_internal_info"]["fake_steps_changed"] == ["deploy.erase_devices"]
    assert _steps_logged(client, "changed-1", "finished") == [
        "deploy.erase_devices_metadata",
        "deploy.erase_devices_metadata",
        "deploy.erase_devices",
    ]
    plans = [e["event"] for e in _history(client, "changed-1") if e["event_type"] == "clean_plan"]
    assert len(plans) == 3, plans
    assert "starts again with the steps the node offers now" in plans[1]


def test_a_flow_whose_steps_keep_changing_is_not_planned_again_for_ever(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent whose hardware managers change at every step would loop: past
    ``MAX_REPLANS`` the flow fails saying why."""
    monkeypatch.setattr(stepflow, "MAX_REPLANS", 1)
    client = stack.client
    info = {"fake_steps_change": "deploy.erase_devices_metadata,deploy.erase_devices"}
    node = _manageable(client, name="changing", driver_info=info)
    assert provision(client, "changing", "provide").status_code == 202
    node = wait_for_state(client, node["uuid"], "clean failed")
    assert "already changed 1 times since the flow began" in node["last_error"]
    plans = [e for e in _history(client, "changing") if e["event_type"] == "clean_plan"]
    assert [e["severity"] for e in plans].count("WARNING") == 1


def test_manual_cleaning_is_not_started_again_when_the_steps_change(stack: Stack) -> None:
    """Manual steps are the operator's and need not be idempotent: the flow fails saying
    why, as Ironic's does, and the operator decides."""
    client = stack.client
    info = {"fake_steps_change": "deploy.erase_devices"}
    node = _manageable(client, name="changed-2", driver_info=info)
    assert _clean(client, "changed-2", _step("deploy.erase_devices")).status_code == 202
    node = wait_for_state(client, node["uuid"], "clean failed")
    assert "steps changed since the plan was made" in node["last_error"]
    assert node["maintenance"] is True
    assert _steps_logged(client, "changed-2", "finished") == []


# -- failure and recovery ------------------------------------------------------


def test_failing_step_leaves_clean_failed_in_maintenance_power_untouched(stack: Stack) -> None:
    client = stack.client
    node = _manageable(
        client, name="fail-1", driver_info={"fake_fail_steps": "deploy.erase_devices"}
    )
    power_on = client.put(
        "/v1/nodes/fail-1/states/power", json={"target": "power on"}, headers=LATEST
    )
    assert power_on.status_code == 202
    wait_for_state(client, "fail-1", "power on", field="power_state")
    assert provision(client, "fail-1", "provide").status_code == 202
    node = wait_for_state(client, node["uuid"], "clean failed")
    assert "deploy.erase_devices" in node["last_error"]
    assert node["maintenance"] is True
    assert node["fault"] == "clean failure"
    assert "deploy.erase_devices" in node["maintenance_reason"]
    assert node["power_state"] == "power on"
    assert node["clean_step"] == {}
    # The step before the failing one ran and stays done.
    assert _steps_logged(client, "fail-1", "finished") == ["deploy.erase_devices_metadata"]
    # Ironic's keys show the plan and where it stopped, in every view of the node.
    shown = node["driver_internal_info"]
    failed_at = shown["clean_steps"][shown["clean_step_index"]]
    assert (failed_at["interface"], failed_at["step"]) == ("deploy", "erase_devices")
    listed = client.get("/v1/nodes?fields=uuid,driver_internal_info", headers=LATEST).json()
    assert [n["driver_internal_info"] for n in listed["nodes"] if n["uuid"] == node["uuid"]] == [
        shown
    ]
    patched = client.patch(
        "/v1/nodes/fail-1", json=[{"op": "add", "path": "/extra/seen", "value": 1}], headers=LATEST
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["driver_internal_info"] == shown

    # Recovery, as in Ironic: manage; manual cleaning waits for maintenance to be
    # turned off; provide is accepted in maintenance and cleans again.
    assert provision(client, "fail-1", "provide").status_code == 400
    assert provision(client, "fail-1", "manage").status_code == 202
    node = wait_for_state(client, "fail-1", "manageable")
    assert node["maintenance"] is True
    assert "clean_steps" not in node["driver_internal_info"], "manage forgets the failed plan"
    refused = _clean(client, "fail-1", _step("deploy.erase_devices"))
    assert refused.status_code == 400
    assert "maintenance" in error_text(refused)
    fixed = client.patch(
        "/v1/nodes/fail-1",
        json=[{"op": "remove", "path": "/driver_info/fake_fail_steps"}],
        headers=LATEST,
    )
    assert fixed.status_code == 200, fixed.text
    assert provision(client, "fail-1", "provide").status_code == 202
    node = wait_for_state(client, "fail-1", "available")
    assert node["maintenance"] is True, "only the operator turns maintenance off"
    assert _steps_logged(client, "fail-1", "finished")[-2:] == [
        "deploy.erase_devices_metadata",
        "deploy.erase_devices",
    ]
    assert client.delete("/v1/nodes/fail-1/maintenance", headers=LATEST).status_code == 202
    node = get_node(client, "fail-1")
    assert (node["maintenance"], node["fault"], node["maintenance_reason"]) == (False, None, None)


def _failed_clean(client: TestClient, name: str) -> None:
    """A node in ``clean failed`` whose fault the operator has since fixed."""
    _manageable(client, name=name, driver_info={"fake_fail_steps": "deploy.erase_devices"})
    assert provision(client, name, "provide").status_code == 202
    wait_for_state(client, name, "clean failed")
    fixed = client.patch(
        f"/v1/nodes/{name}",
        json=[{"op": "remove", "path": "/driver_info/fake_fail_steps"}],
        headers=LATEST,
    )
    assert fixed.status_code == 200, fixed.text


def test_provide_from_clean_failed_cleans_again_once_maintenance_is_off(stack: Stack) -> None:
    """Seed 000: from CLEANFAIL the operator retries cleaning or goes on to AVAILABLE."""
    client = stack.client
    _failed_clean(client, "retry-1")
    refused = provision(client, "retry-1", "provide")
    assert refused.status_code == 400
    assert "retrying cleaning needs it turned off first" in error_text(refused)
    assert get_node(client, "retry-1")["provision_state"] == "clean failed"
    assert client.delete("/v1/nodes/retry-1/maintenance", headers=LATEST).status_code == 202
    assert provision(client, "retry-1", "provide").status_code == 202
    node = wait_for_state(client, "retry-1", "available")
    assert node["last_error"] is None
    assert node["maintenance"] is False
    assert _steps_logged(client, "retry-1", "finished")[-2:] == [
        "deploy.erase_devices_metadata",
        "deploy.erase_devices",
    ]


def test_manual_clean_from_clean_failed_runs_the_steps_asked_for(stack: Stack) -> None:
    client = stack.client
    _failed_clean(client, "retry-2")
    assert client.delete("/v1/nodes/retry-2/maintenance", headers=LATEST).status_code == 202
    before = len(_steps_logged(client, "retry-2", "finished"))
    response = _clean(client, "retry-2", _step("deploy.erase_devices"))
    assert response.status_code == 202, response.text
    node = wait_for_state(client, "retry-2", "manageable")
    assert node["last_error"] is None
    assert _steps_logged(client, "retry-2", "finished")[before:] == ["deploy.erase_devices"]


def test_step_rejecting_its_arguments_fails_after_earlier_steps(stack: Stack) -> None:
    client = stack.client
    node = _manageable(client, name="args-1")
    assert _set_raid(client, "args-1", RAID).status_code == 204
    response = _clean(
        client,
        "args-1",
        _step("bios.apply_configuration", settings=[{"name": "boot_mode", "value": "uefi"}]),
        _step("raid.create_configuration", create_root_volume="yes"),
        _step("management.reset_bios"),
    )
    assert response.status_code == 202, response.text
    node = wait_for_state(client, node["uuid"], "clean failed")
    assert node["target_provision_state"] == "manageable"
    assert "raid.create_configuration" in node["last_error"]
    assert "create_root_volume" in node["last_error"]
    assert bios_of(client, node["uuid"]) == {"boot_mode": "uefi"}
    assert node["raid_config"] == {}
    assert _steps_logged(client, "args-1", "finished") == ["bios.apply_configuration"]
    assert "management.reset_bios" not in _steps_logged(client, "args-1", "started")


# -- waiting, aborting, timing out ---------------------------------------------


def test_abort_stops_an_abortable_step_at_once(configured: StackFactory) -> None:
    stack = configured(clean_step_priority_override=["deploy.erase_devices_metadata:0"])
    client = stack.client
    node = _manageable(client, name="abort-1", driver_info={"fake_step_delay": 60})
    assert provision(client, "abort-1", "provide").status_code == 202
    node = wait_for_state(client, node["uuid"], "clean wait")
    assert node["clean_step"]["step"] == "erase_devices"
    assert node["clean_step"]["abortable"] is True

    # While the node cleans, it refuses what would interfere.
    power = client.put(
        "/v1/nodes/abort-1/states/power", json={"target": "power on"}, headers=LATEST
    )
    assert power.status_code == 400
    assert "clean wait" in error_text(power)
    for verb in ("active", "manage", "provide", "clean", "deleted"):
        body = {"clean_steps": [_step("deploy.erase_devices")]} if verb == "clean" else {}
        response = provision(client, "abort-1", verb, **body)
        assert response.status_code in (400, 409), (verb, response.text)
    patched = client.patch(
        "/v1/nodes/abort-1", json=[{"op": "add", "path": "/extra/x", "value": 1}], headers=LATEST
    )
    assert patched.status_code == 409

    assert provision(client, "abort-1", "abort").status_code == 202
    node = wait_for_state(client, "abort-1", "clean failed", timeout=30)
    assert "aborted" in node["last_error"]
    assert "deploy.erase_devices" in node["last_error"]
    assert node["clean_step"] == {}
    assert "deploy.erase_devices" not in _steps_logged(client, "abort-1", "finished")


def test_abort_waits_for_a_non_abortable_step(stack: Stack) -> None:
    client = stack.client
    node = _manageable(client, name="after-1", driver_info={"fake_step_delay": 2})
    assert _set_raid(client, "after-1", RAID).status_code == 204
    response = _clean(
        client,
        "after-1",
        _step("raid.create_configuration"),
        _step("deploy.erase_devices_metadata"),
    )
    assert response.status_code == 202
    node = wait_for_state(client, node["uuid"], "clean wait")
    assert node["clean_step"]["step"] == "create_configuration"
    assert node["clean_step"]["abortable"] is False
    assert provision(client, "after-1", "abort").status_code == 202
    wait_until(
        "abort_after to be recorded",
        lambda: bool(get_node(client, "after-1")["clean_step"].get("abort_after")),
    )
    assert get_node(client, "after-1")["provision_state"] == "clean wait"
    node = wait_for_state(client, "after-1", "clean failed")
    assert "after the non-abortable step finished" in node["last_error"]
    # The step ran to its end; the next one never started.
    assert len(node["raid_config"]["logical_disks"]) == 2
    assert _steps_logged(client, "after-1", "finished") == ["raid.create_configuration"]
    assert "deploy.erase_devices_metadata" not in _steps_logged(client, "after-1", "started")


def test_waiting_too_long_fails_naming_the_step(configured: StackFactory) -> None:
    """The default half-hour wait, passed at once on the clock every conductor shares."""
    clock = AdjustableClock()
    client = configured(clock=clock).client
    node = _manageable(client, name="slow-1", driver_info={"fake_step_delay": 7200})
    assert _clean(client, "slow-1", _step("deploy.erase_devices")).status_code == 202
    wait_for_state(client, node["uuid"], "clean wait")
    clock.advance(1799)
    assert get_node(client, "slow-1")["provision_state"] == "clean wait"
    clock.advance(2)
    node = wait_for_state(client, "slow-1", "clean failed", timeout=15)
    assert "timed out after 1800s" in node["last_error"]
    assert "deploy.erase_devices" in node["last_error"]
    assert node["maintenance"] is True
    assert node["fault"] == "clean failure"
