"""Property-based fuzzing of every operation in our own ``/openapi.json``.

Schemathesis generates valid (positive) and invalid (negative) requests from
the schema and sends them in-process to the ASGI app. Whatever it sends, the
API must never answer 5xx, every 4xx must be in Ironic's error format (the
clients parse nothing else), and every response must carry the version
headers ironicclient negotiates from.

Two things make the fuzzing reach past "404, no such node":

* a seed node (with a port) exists before every example, and a third of the
  examples of operations on ``/nodes/{node_ident}`` or ``/ports/{port_ident}``
  address it; the database is emptied and the seed recreated before each
  example, so examples cannot influence each other and runs are repeatable;
* the query parameters the routes read by hand (so the generated schema does
  not describe them) are added to this test's copy of the schema, with
  values that mix valid and invalid ones (the seed's UUID as ``marker``...).

Generation is derandomized and bounded, so CI sees the same examples each
run; no conductor runs, so nothing changes behind the fuzzer's back.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from sqlalchemy import delete

from metalforge.db.models import Node, NodeHistory, NodeTrait, Port, WorkItem
from tests.support.stack import Stack, start_stack
from tests.support.stack import test_settings as stack_settings

MAX_EXAMPLES = 25
"""Per operation; with ~35 operations the whole test stays well under two minutes."""

HEADERS = {"X-OpenStack-Ironic-API-Version": "latest"}
SEED_NODE = "1be26c0b-03f2-4d23-9c0f-ad0a1b2c3d4e"
SEED_NAME = "fuzz-seed"
SEED_PORT = "2c7f9e51-7a44-4a1e-8a3e-b1c2d3e4f5a6"
SEED_MAC = "52:54:00:12:34:56"

_BOOLEAN = {"type": "string", "enum": ["True", "false", "1", "no", "On", "maybe", ""]}
_PAGING: dict[str, Any] = {
    "limit": {"type": "integer"},
    "marker": {"type": "string", "enum": [SEED_NODE, SEED_PORT, "not-a-marker"]},
    "sort_dir": {"type": "string", "enum": ["asc", "desc", "sideways"]},
}
_NODE_LIST: dict[str, Any] = {
    **_PAGING,
    "sort_key": {
        "type": "string",
        "enum": ["id", "name", "fault", "owner", "created_at", "provision_state", "extra", "x"],
    },
    "associated": _BOOLEAN,
    "maintenance": _BOOLEAN,
    "retired": _BOOLEAN,
    "include_children": _BOOLEAN,
    "provision_state": {"type": "string", "enum": ["enroll", "available", "flying"]},
    "fault": {"type": "string", "enum": ["power failure", "bad luck"]},
    "resource_class": {"type": "string"},
    "conductor_group": {"type": "string"},
    "shard": {"type": "string"},
    "description_contains": {"type": "string"},
}
_NODE_FIELDS = {"type": "string", "enum": ["uuid,name", "traits", "ports,links", "bogus", ""]}
_PORT_LIST: dict[str, Any] = {
    **_PAGING,
    "sort_key": {"type": "string", "enum": ["id", "name", "address", "pxe_enabled", "extra"]},
    "node": {"type": "string", "enum": [SEED_NODE, SEED_NAME, "missing-node"]},
    "address": {"type": "string"},
}
EXTRA_QUERY: dict[tuple[str, str], dict[str, Any]] = {
    ("get", "/v1/nodes"): {**_NODE_LIST, "fields": _NODE_FIELDS, "detail": _BOOLEAN},
    ("get", "/v1/nodes/detail"): _NODE_LIST,
    ("get", "/v1/nodes/{node_ident}"): {"fields": _NODE_FIELDS},
    ("patch", "/v1/nodes/{node_ident}"): {"reset_interfaces": _BOOLEAN},
    ("get", "/v1/nodes/{node_ident}/history"): {
        "limit": {"type": "integer"},
        "detail": _BOOLEAN,
        "marker": {"type": "string"},
    },
    ("get", "/v1/ports"): {
        **_PORT_LIST,
        "fields": {"type": "string", "enum": ["uuid,address", "name", "bogus"]},
        "detail": _BOOLEAN,
    },
    ("get", "/v1/ports/detail"): _PORT_LIST,
    ("get", "/v1/conductors"): {
        **_PAGING,
        "sort_key": {"type": "string", "enum": ["hostname", "bogus"]},
        "detail": _BOOLEAN,
        "fields": {"type": "string", "enum": ["hostname,alive", "bogus"]},
    },
    ("get", "/v1/drivers"): {
        "type": {"type": "string", "enum": ["classic", "dynamic", "other"]},
        "detail": _BOOLEAN,
    },
}
"""Query parameters the routes parse themselves, so ``/openapi.json`` does not list them."""

SEEDED_PARAMETERS = {"node_ident": [SEED_NODE, SEED_NAME], "port_ident": [SEED_PORT]}
"""Path parameters that, for some examples, name the seed instead of something random."""


@pytest.fixture(scope="module")
def fuzz_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "metalforge.sqlite"
    stack = start_stack(stack_settings(f"sqlite:///{path}"), start_conductor=False)
    try:
        yield stack
    finally:
        stack.stop()


def _with_query_parameters(raw: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(raw)
    for (method, path), params in EXTRA_QUERY.items():
        operation = spec["paths"][path][method]
        operation.setdefault("parameters", []).extend(
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in params.items()
        )
    return spec


def _reset(stack: Stack) -> None:
    """Empty every table the API writes and recreate the seed node and port."""
    with stack.db.write() as session:
        for model in (NodeTrait, Port, NodeHistory, WorkItem, Node):
            session.execute(delete(model))
    client = stack.client
    created = client.post(
        "/v1/nodes",
        json={"driver": "fake-hardware", "uuid": SEED_NODE, "name": SEED_NAME},
        headers=HEADERS,
    )
    assert created.status_code == 201, created.text
    port = client.post(
        "/v1/ports",
        json={"address": SEED_MAC, "node_uuid": SEED_NODE, "uuid": SEED_PORT},
        headers=HEADERS,
    )
    assert port.status_code == 201, port.text
    traits = client.put(
        f"/v1/nodes/{SEED_NODE}/traits", json={"traits": ["CUSTOM_FUZZ"]}, headers=HEADERS
    )
    assert traits.status_code == 204, traits.text


def _strategy(operation: Any) -> st.SearchStrategy[Any]:
    strategies = [operation.as_strategy(GenerationMode.POSITIVE)]
    try:
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE))
    except Exception:  # an operation with nothing to negate (no parameters, no body)
        pass
    names = {p.name for p in operation.path_parameters}
    for name, values in SEEDED_PARAMETERS.items():
        if name in names:
            strategies.extend(
                operation.as_strategy(GenerationMode.POSITIVE, path_parameters={name: value})
                for value in values
            )
    return st.one_of(strategies)


def _check_response(response: Any) -> None:
    """The properties every response must have, whatever the request was."""
    status = response.status_code
    assert status < 500, f"server error {status}: {response.text[:500]}"
    headers = {name.lower(): values[0] for name, values in response.headers.items()}
    assert headers.get("x-openstack-ironic-api-minimum-version") == "1.1", headers
    assert headers.get("x-openstack-ironic-api-maximum-version"), headers
    if status >= 400:
        assert headers["content-type"].startswith("application/json"), status
        body = response.json()
        assert set(body) == {"error_message"}, body
        assert isinstance(body["error_message"], str), body
        inner = json.loads(body["error_message"])
        message = inner.get("faultstring") or inner.get("description")
        assert isinstance(message, str) and message, inner


def test_no_operation_answers_5xx_or_a_foreign_error_format(fuzz_stack: Stack) -> None:
    raw = fuzz_stack.client.get("/openapi.json").json()
    schema = schemathesis.openapi.from_dict(_with_query_parameters(raw))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30, [op.label for op in operations]
    failures: list[str] = []
    started = time.monotonic()
    for operation in operations:

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @given(case=_strategy(operation))
        def fuzz(case: Any) -> None:
            _reset(fuzz_stack)
            request = case.as_curl_command(headers=HEADERS)
            try:
                response = case.call(app=fuzz_stack.app, headers=HEADERS)
            except Exception as exc:  # the app raised: a 500 for a real client
                raise AssertionError(f"{request}\n  -> {type(exc).__name__}: {exc}") from exc
            try:
                _check_response(response)
            except AssertionError as exc:
                raise AssertionError(f"{request}\n  -> {exc}") from None

        try:
            fuzz()
        except AssertionError as exc:
            failures.append(f"{operation.label}: {exc}")
    elapsed = time.monotonic() - started
    assert not failures, "\n".join(failures)
    assert elapsed < 150, f"fuzzing took {elapsed:.0f}s; lower MAX_EXAMPLES"
