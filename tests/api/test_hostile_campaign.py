"""A hostile-input campaign: long request sequences against a working service, no resets.

Where ``test_schemathesis`` checks each request on a fresh database, this
campaign lets requests pile up on the same nodes while a conductor works:
schemathesis cases of every operation (positive and negative), sequences of
JSON patches nesting ever deeper into the same documents, generated
inspection reports and agent heartbeats. Whatever happened, afterwards:

* no request was answered 5xx;
* the conductor comes to rest: no node keeps a reservation, no work item is
  left unfinished;
* every node can be repaired and deleted through the API (maintenance on,
  protection off, instance and allocation removed, ``DELETE``).

Generation is derandomized and bounded, so CI sees the same sequences each run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from metalforge.db.models import Node, WorkItem
from tests.api.test_schemathesis import (
    HEADERS,
    SEED_MAC,
    SEED_NAME,
    SEED_NODE,
    SEED_PORT,
    _loaded,
    _strategy,
    _with_hints,
)
from tests.support.stack import Stack, start_stack
from tests.support.stack import test_settings as stack_settings

CASES_PER_OPERATION = 8
PATCHES = 60
REPORTS = 30
HEARTBEATS = 30
VERB_REQUESTS = 80
ENROLMENTS = 10
"""How many of each are sent, shuffled into one sequence on the same database."""

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    path: Path = tmp_path_factory.mktemp("campaign") / "metalforge.sqlite"
    settings_ = stack_settings(
        f"sqlite:///{path}",
        work_deadlines={"provision": 30.0, "power": 30.0},
    )
    running = start_stack(settings_)
    running.app.state.stopping = lambda: True  # event streams answer and end
    try:
        yield running
    finally:
        running.stop()


def _keep_seed(stack: Stack) -> None:
    """Put the seed node and its port back if the campaign deleted them: the cases that
    name them must keep finding something to work on."""
    client = stack.client
    if client.get(f"/v1/nodes/{SEED_NODE}", headers=HEADERS).status_code == 404:
        created = client.post(
            "/v1/nodes",
            json={"driver": "fake-hardware", "uuid": SEED_NODE, "name": SEED_NAME},
            headers=HEADERS,
        )
        assert created.status_code == 201, created.text
    if client.get(f"/v1/ports/{SEED_PORT}", headers=HEADERS).status_code == 404:
        client.post(
            "/v1/ports",
            json={"address": SEED_MAC, "node_uuid": SEED_NODE, "uuid": SEED_PORT},
            headers=HEADERS,
        )


def _node_idents(stack: Stack) -> list[str]:
    with stack.db.read() as session:
        return list(session.scalars(select(Node.uuid).order_by(Node.id).limit(20)))


def _deep(depth: int, leaf: Any) -> Any:
    for index in range(depth):
        leaf = {f"k{index}": leaf}
    return leaf


PATCH_FIELDS = ("extra", "properties", "driver_info", "instance_info")


@st.composite
def _patch(draw: st.DrawFn) -> tuple[str, str, Any]:
    """A JSON patch that nests ever deeper, or carries odd values, into a node's documents."""
    field = draw(st.sampled_from(PATCH_FIELDS))
    depth = draw(st.integers(0, 40))
    path = f"/{field}/" + "/".join(f"k{i}" for i in range(draw(st.integers(0, 3))) or ["a"])
    value = _deep(depth, draw(JSON_VALUES))
    op = draw(st.sampled_from(["add", "replace", "remove"]))
    body = (
        [{"op": op, "path": path, "value": value}] if op != "remove" else [{"op": op, "path": path}]
    )
    return ("PATCH", "/v1/nodes/{node}", body)


@st.composite
def _report(draw: st.DrawFn) -> tuple[str, str, Any]:
    interfaces = draw(
        st.lists(
            st.fixed_dictionaries(
                {"name": st.text(max_size=8), "mac_address": st.sampled_from([SEED_MAC, "x"])}
            ),
            max_size=3,
        )
    )
    report: Any = {
        "inventory": {
            "interfaces": interfaces,
            "cpu": draw(JSON_VALUES),
            "memory": {"physical_mb": draw(JSON_LEAVES)},
            "disks": draw(st.lists(JSON_VALUES, max_size=2)),
        },
        "error": draw(st.one_of(st.none(), st.text(max_size=200))),
        **draw(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3)),
    }
    if draw(st.booleans()):
        report = draw(JSON_VALUES)
    return ("POST", "/v1/continue_inspection", report)


VERBS = ("manage", "provide", "inspect", "active", "deleted", "abort", "clean", "service")
SERVICE_STEP_LISTS = [
    [{"interface": "raid", "step": "delete_configuration"}],
    [{"interface": "management", "step": "reset_bios", "args": {"password": "x"}}],
]
STEP_LISTS = [
    [{"interface": "deploy", "step": "erase_devices_metadata"}],
    [{"interface": "deploy", "step": "erase_devices_metadata", "args": {"password": "x"}}],
    [{"interface": "bios", "step": "nope"}],
]


@st.composite
def _verb(draw: st.DrawFn) -> tuple[str, str, Any]:
    """A provision or power request, so flows run while the rest of the campaign goes on."""
    if draw(st.booleans()):
        target = draw(st.sampled_from(["power on", "power off", "rebooting"]))
        return ("PUT", "/v1/nodes/{node}/states/power", {"target": target})
    body: dict[str, Any] = {"target": draw(st.sampled_from(VERBS))}
    if body["target"] == "clean":
        body["clean_steps"] = draw(st.sampled_from(STEP_LISTS))
    elif body["target"] == "service":
        body["service_steps"] = draw(st.sampled_from(SERVICE_STEP_LISTS))
    return ("PUT", "/v1/nodes/{node}/states/provision", body)


@st.composite
def _enroll(draw: st.DrawFn) -> tuple[str, str, Any]:
    delay = draw(st.sampled_from([0, 0.05, 0.2]))
    body = {"driver": "fake-hardware", "driver_info": {"fake_step_delay": delay}}
    return ("POST", "/v1/nodes", body)


@st.composite
def _heartbeat(draw: st.DrawFn) -> tuple[str, str, Any]:
    body = draw(
        st.one_of(
            st.fixed_dictionaries(
                {
                    "callback_url": st.sampled_from(
                        ["http://127.0.0.1:9999", "ftp://x", "not a url"]
                    ),
                    "agent_token": st.text(max_size=20),
                    "agent_version": st.text(max_size=10),
                }
            ),
            JSON_VALUES,
        )
    )
    return ("POST", "/v1/heartbeat/{node}", body)


def _operations(stack: Stack) -> list[Any]:
    raw = stack.client.get("/openapi.json").json()
    config = schemathesis.Config.from_dict(
        {"generation": {"allow-x00": False}, "output": {"sanitization": {"enabled": False}}}
    )
    schema = schemathesis.openapi.from_dict(_with_hints(raw), config=config)
    operations = [_loaded(result) for result in schema.get_all_operations()]
    # Streams and long polls would only wait; everything else is fair game.
    return [operation for operation in operations if "events" not in operation.path]


def _send(stack: Stack, step: Any, node: str, log: list[str]) -> None:
    if isinstance(step, tuple):
        method, path, body = step
        path = path.replace("{node}", node)
        response = stack.client.request(method, path, json=body, headers=HEADERS)
        described = f"{method} {path}"
    else:
        response = step.call(app=stack.app, headers=HEADERS)
        described = f"{step.method} {step.formatted_path}"
    log.append(f"{described} -> {response.status_code}")
    assert response.status_code < 500, f"{described} -> {response.status_code}: {response.text}"


def _at_rest(stack: Stack, timeout: float = 120.0) -> None:
    """Until no node is reserved and no work item is unfinished."""
    deadline = time.monotonic() + timeout
    while True:
        with stack.db.read() as session:
            reserved = session.scalar(
                select(func.count()).select_from(Node).where(Node.reservation.is_not(None))
            )
            unfinished = session.scalar(
                select(func.count())
                .select_from(WorkItem)
                .where(WorkItem.state.in_(["pending", "claimed"]))
            )
        if not reserved and not unfinished:
            return
        assert time.monotonic() < deadline, f"{reserved} reserved, {unfinished} unfinished"
        time.sleep(0.2)


def _repair_and_delete(stack: Stack, uuid: str) -> None:
    """Maintenance on, protection off, instance and allocation gone, then ``DELETE``."""
    client = stack.client
    node = client.get(f"/v1/nodes/{uuid}", headers=HEADERS).json()
    if node.get("allocation_uuid"):
        gone = client.delete(f"/v1/allocations/{node['allocation_uuid']}", headers=HEADERS)
        assert gone.status_code in (204, 404), gone.text
    patch = [
        {"op": "replace", "path": "/maintenance", "value": True},
        {"op": "replace", "path": "/protected", "value": False},
    ]
    repaired = client.patch(f"/v1/nodes/{uuid}", json=patch, headers=HEADERS)
    assert repaired.status_code == 200, repaired.text
    if client.get(f"/v1/nodes/{uuid}", headers=HEADERS).json().get("instance_uuid"):
        unbound = client.patch(
            f"/v1/nodes/{uuid}",
            json=[{"op": "remove", "path": "/instance_uuid"}],
            headers=HEADERS,
        )
        assert unbound.status_code == 200, unbound.text
    deleted = client.delete(f"/v1/nodes/{uuid}", headers=HEADERS)
    assert deleted.status_code == 204, deleted.text


def _examples(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` examples of ``strategy``, the same ones every run."""
    found: list[Any] = []

    @settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(example=strategy)
    def gather(example: Any) -> None:
        found.append(example)

    gather()
    return found


@pytest.mark.slow
def test_a_hostile_campaign_leaves_every_node_movable(stack: Stack) -> None:
    operations = _operations(stack)
    assert len(operations) >= 30
    steps: list[Any] = []
    for operation in operations:
        steps += _examples(_strategy(operation), CASES_PER_OPERATION)
    steps += _examples(_patch(), PATCHES)
    steps += _examples(_report(), REPORTS)
    steps += _examples(_heartbeat(), HEARTBEATS)
    steps += _examples(_verb(), VERB_REQUESTS)
    steps += _examples(_enroll(), ENROLMENTS)
    order = random.Random(20261127)
    order.shuffle(steps)
    log: list[str] = []
    for step in steps:
        _keep_seed(stack)
        _send(stack, step, order.choice(_node_idents(stack)), log)
    assert len(log) == len(steps)
    _at_rest(stack)
    for uuid in _node_idents(stack):
        _repair_and_delete(stack, uuid)
    assert _node_idents(stack) == []
