"""Hostile JSON in every free-form place a body has, with a conductor working behind the API.

``test_schemathesis`` fuzzes every operation with no conductor running; this
campaign sends generated documents (integers past 64 bits, NaN and
Infinity, deep nesting, NUL and lone surrogates, long strings) into the
bodies that store or queue what they are given, while a conductor processes
the queue. Whatever is sent: no 5xx, a refused body changes nothing, an
accepted one reads back as it was written, and at the end every node rests
with no reservation, no work is left unfinished and nothing was
dead-lettered. Generation is derandomized and bounded: the same examples
every run.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from metalforge.db import queue
from metalforge.db.models import Node, WorkItem
from tests.support.api import LATEST, make_available
from tests.support.stack import Stack

EXAMPLES = 40
"""Per target; five targets keep the campaign around half a minute."""
JSON = {**LATEST, "Content-Type": "application/json"}

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([10**400, -(10**400), 2**63, 2**64, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "x" * 5000]),
)
values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def deep(draw: st.DrawFn) -> Any:
    """A value nested 1-60 levels deep (the edge refuses past 25)."""
    value: Any = draw(_scalars)
    for _ in range(draw(st.integers(min_value=1, max_value=60))):
        value = [value] if draw(st.booleans()) else {"k": value}
    return value


documents = st.one_of(values, deep())


def _raw(body: Any) -> bytes:
    # The standard library writes NaN and Infinity (and lone surrogates as
    # escapes), as a careless client would; the API must refuse them cleanly.
    return json.dumps(body, allow_nan=True).encode()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _campaign(stack: Stack, send: Any, read_back: Any | None = None) -> None:
    client = stack.client

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(document=documents)
    def run(document: Any) -> None:
        response = send(client, document)
        assert response.status_code < 500, (document, response.text[:300])
        if response.status_code < 300 and read_back is not None:
            stored = read_back(client)
            assert _same(stored, document), (document, stored)

    run()


def _settled(stack: Stack, timeout: float = 60.0) -> None:
    """Every node rests unreserved, no work is unfinished, nothing is dead-lettered."""
    deadline = time.monotonic() + timeout
    while True:
        with stack.db.read() as session:
            busy = session.scalar(
                select(func.count())
                .select_from(WorkItem)
                .where(WorkItem.state.in_([queue.PENDING, queue.CLAIMED]))
            )
            reserved = session.scalar(
                select(func.count()).select_from(Node).where(Node.reservation.is_not(None))
            )
            dead = list(session.scalars(select(WorkItem).where(WorkItem.state == queue.DEAD)))
        assert not dead, [(d.kind, d.last_error) for d in dead]
        if busy == 0 and reserved == 0:
            return
        assert time.monotonic() < deadline, f"{busy} unfinished items, {reserved} reserved nodes"
        time.sleep(0.1)


@pytest.mark.slow
def test_hostile_documents_never_break_the_api_or_wedge_a_node(sqlite_stack: Stack) -> None:
    client: TestClient = sqlite_stack.client
    node = make_available(client, name="hostile")
    uuid = node["uuid"]

    def create_node(c: TestClient, document: Any) -> Any:
        body = {"driver": "fake-hardware", "extra": {"doc": document}}
        return c.post("/v1/nodes", content=_raw(body), headers=JSON)

    def patch_extra(c: TestClient, document: Any) -> Any:
        patch = [{"op": "add", "path": "/extra/doc", "value": document}]
        return c.patch(f"/v1/nodes/{uuid}", content=_raw(patch), headers=JSON)

    def read_extra(c: TestClient) -> Any:
        return c.get(f"/v1/nodes/{uuid}", headers=LATEST).json()["extra"]["doc"]

    def patch_instance_info(c: TestClient, document: Any) -> Any:
        patch = [{"op": "add", "path": "/instance_info/doc", "value": document}]
        return c.patch(f"/v1/nodes/{uuid}", content=_raw(patch), headers=JSON)

    def read_instance_info(c: TestClient) -> Any:
        return c.get(f"/v1/nodes/{uuid}", headers=LATEST).json()["instance_info"]["doc"]

    def power(c: TestClient, document: Any) -> Any:
        body = {"target": "power on", "timeout": document}
        return c.put(f"/v1/nodes/{uuid}/states/power", content=_raw(body), headers=JSON)

    def allocation(c: TestClient, document: Any) -> Any:
        body = {"resource_class": "hostile-none", "extra": {"doc": document}}
        return c.post("/v1/allocations", content=_raw(body), headers=JSON)

    _campaign(sqlite_stack, create_node)
    _campaign(sqlite_stack, patch_extra, read_extra)
    _campaign(sqlite_stack, patch_instance_info, read_instance_info)
    _campaign(sqlite_stack, power)
    _campaign(sqlite_stack, allocation)
    _settled(sqlite_stack)
    # The node it all happened to still moves.
    moved = client.put(
        f"/v1/nodes/{uuid}/states/provision", json={"target": "manage"}, headers=LATEST
    )
    assert moved.status_code == 202, moved.text
    _settled(sqlite_stack)
    listed = client.get("/v1/nodes/detail", headers=LATEST)
    assert listed.status_code == 200
