"""Property-based fuzzing of every operation in our own ``/openapi.json``.

Schemathesis generates valid (positive) and invalid (negative) requests from
the schema and sends them in-process to the ASGI app. Whatever it sends, the
API must never answer 5xx, every 4xx must be in Ironic's error format (the
clients parse nothing else), and every response must carry the version
headers ironicclient negotiates from.

Two things make the fuzzing reach past "404, no such node":

* a seed node (with a port) exists before every example, and a third of the
  examples of operations on ``/nodes/{node_ident}`` or ``/ports/{port_ident}``
  address it; every table is put back as it was once the seed was created
  before each example, so examples cannot influence each other and runs
  are repeatable;
* the query parameters the routes read by hand (so the generated schema does
  not describe them) are added to this test's copy of the schema, with
  values that mix valid and invalid ones (the seed's UUID as ``marker``...).

Generation is derandomized and bounded, so CI sees the same examples each
run; no conductor runs, so nothing changes behind the fuzzer's back.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, GenerationMode
from schemathesis.core.errors import InvalidSchema
from schemathesis.core.result import Err, Result

from tests.support.snapshots import restore, snapshot
from tests.support.stack import Stack, start_stack
from tests.support.stack import test_settings as stack_settings

MAX_EXAMPLES = 30
"""Per operation; with ~35 operations the whole test stays well under two minutes."""

HEADERS = {"X-OpenStack-Ironic-API-Version": "latest"}
SEED_NODE = "1be26c0b-03f2-4d23-9c0f-ad0a1b2c3d4e"
SEED_NAME = "fuzz-seed"
SEED_PORT = "2c7f9e51-7a44-4a1e-8a3e-b1c2d3e4f5a6"
SEED_MAC = "52:54:00:12:34:56"


def _one_of(*values: Any) -> dict[str, Any]:
    return {"enum": list(values)}


# Valid values only: negative examples stray from them by themselves, and an
# invalid value here would end most positive examples at the first check.
_BOOLEAN = _one_of("True", "false", "1", "no", "On")
_LIMIT = {"type": "integer", "minimum": 1, "maximum": 3}
_NODE_LIST: dict[str, Any] = {
    "limit": _LIMIT,
    "marker": _one_of(SEED_NODE),
    "sort_dir": _one_of("asc", "desc"),
    # Half of them are NULL on the seed node, which a marker must cope with.
    "sort_key": _one_of(
        "id", "name", "fault", "owner", "resource_class", "updated_at", "maintenance"
    ),
    "associated": _BOOLEAN,
    "maintenance": _BOOLEAN,
    "include_children": _BOOLEAN,
    "provision_state": _one_of("enroll", "available"),
    "fault": _one_of("power failure"),
    "resource_class": {"type": "string"},
    "description_contains": {"type": "string"},
}
_NODE_FIELDS = _one_of("uuid,name", "traits", "ports,links,fault", "allocation_uuid")
_PORT_LIST: dict[str, Any] = {
    "limit": _LIMIT,
    "marker": _one_of(SEED_PORT),
    "sort_dir": _one_of("asc", "desc"),
    "sort_key": _one_of("id", "name", "address", "pxe_enabled"),
    "node": _one_of(SEED_NODE, SEED_NAME),
    "address": _one_of(SEED_MAC),
}
EXTRA_QUERY: dict[tuple[str, str], dict[str, Any]] = {
    ("get", "/v1/nodes"): {**_NODE_LIST, "fields": _NODE_FIELDS, "detail": _BOOLEAN},
    ("get", "/v1/nodes/detail"): _NODE_LIST,
    ("get", "/v1/nodes/{node_ident}"): {"fields": _NODE_FIELDS},
    ("patch", "/v1/nodes/{node_ident}"): {"reset_interfaces": _BOOLEAN},
    ("get", "/v1/nodes/{node_ident}/history"): {"limit": _LIMIT, "detail": _BOOLEAN},
    ("get", "/v1/ports"): {
        **_PORT_LIST,
        "fields": _one_of("uuid,address", "name", "node_uuid,links"),
        "detail": _BOOLEAN,
    },
    ("get", "/v1/ports/detail"): _PORT_LIST,
    ("get", "/v1/conductors"): {
        "limit": _LIMIT,
        "marker": _one_of("test-conductor"),
        "sort_key": _one_of("hostname", "conductor_group"),
        "detail": _BOOLEAN,
        "fields": _one_of("hostname,alive", "drivers"),
    },
    ("get", "/v1/drivers"): {"type": _one_of("classic", "dynamic"), "detail": _BOOLEAN},
}
"""Query parameters the routes parse themselves, so ``/openapi.json`` does not list them."""

_UUID = {"type": "string", "format": "uuid"}
_NODE_REF = {"type": "string", "enum": [SEED_NODE, SEED_NAME, "missing-node"]}
BODY_HINTS: dict[tuple[str, str], dict[str, Any]] = {
    ("NodeCreate", "driver"): {"type": "string", "enum": ["fake-hardware"]},
    ("NodeCreate", "name"): {"type": "string", "enum": ["fuzz-node", SEED_NAME, "detail"]},
    ("NodeCreate", "uuid"): _UUID,
    ("NodeCreate", "instance_uuid"): _UUID,
    ("NodeCreate", "chassis_uuid"): _UUID,
    ("NodeCreate", "parent_node"): _UUID,
    ("NodeCreate", "deploy_interface"): {"type": "string", "enum": ["fake", "direct"]},
    ("NodeCreate", "network_interface"): {"type": "string", "enum": ["noop", "flat"]},
    ("PortCreate", "address"): {"type": "string", "pattern": "^([0-9a-f]{2}:){5}[0-9a-f]{2}$"},
    ("PortCreate", "node_uuid"): _NODE_REF,
    ("PortCreate", "node_ident"): _NODE_REF,
    ("PortCreate", "uuid"): _UUID,
    ("VolumeConnectorCreate", "node_uuid"): _NODE_REF,
    ("VolumeTargetCreate", "node_uuid"): _NODE_REF,
    ("ProvisionRequest", "target"): {
        "type": "string",
        "enum": [
            "manage",
            "provide",
            "inspect",
            "clean",
            "active",
            "deploy",
            "deleted",
            "rebuild",
            "abort",
            "adopt",
            "rescue",
            "unrescue",
            "unhold",
            "service",
        ],
    },
    ("PowerRequest", "target"): {
        "type": "string",
        "enum": ["power on", "power off", "rebooting", "soft power off", "soft rebooting"],
    },
    ("PatchOperation", "path"): {
        "type": "string",
        "enum": [
            "/extra/a",
            "/extra",
            "/name",
            "/description",
            "/driver",
            "/maintenance",
            "/properties/cpus",
            "/instance_info/image_source",
            "/resource_class",
            "/instance_uuid",
            "/protected",
            "/parent_node",
            "/conductor_group",
            "/traits",
            "/uuid",
            "/provision_state",
            "/address",
            "/node_uuid",
            "/pxe_enabled",
            "/local_link_connection",
            "/extra/a~1b",
        ],
    },
    ("TraitsReplace", "traits"): {
        "type": "array",
        "items": {"type": "string", "enum": ["CUSTOM_FUZZ", "HW_CPU_X86_AVX2", "custom_no"]},
    },
}
"""Values that get past the first validation step; negative examples still stray from them."""

SEEDED_PARAMETERS = {
    "node_ident": [SEED_NODE, SEED_NAME],
    "port_ident": [SEED_PORT],
    "trait": ["CUSTOM_FUZZ", "HW_CPU_X86_AVX2"],
    "hostname": ["test-conductor"],
    "name": ["fake-hardware"],
}
"""Path parameters that, for some examples, name something that exists."""


@pytest.fixture(scope="module")
def fuzz_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "metalforge.sqlite"
    stack = start_stack(stack_settings(f"sqlite:///{path}"), start_conductor=False)
    # The event stream lasts until the server stops; as if stopping, it answers and ends.
    stack.app.state.stopping = lambda: True
    try:
        yield stack
    finally:
        stack.stop()


def _with_hints(raw: dict[str, Any]) -> dict[str, Any]:
    """This test's copy of the schema: hand-parsed query parameters and value hints added."""
    spec = copy.deepcopy(raw)
    for (method, path), params in EXTRA_QUERY.items():
        operation = spec["paths"][path][method]
        operation.setdefault("parameters", []).extend(
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in params.items()
        )
    for (model, prop), hint in BODY_HINTS.items():
        spec["components"]["schemas"][model]["properties"][prop] = hint
    return spec


def _seed(stack: Stack) -> None:
    """Create the seed node, its port and a trait through the API."""
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
    # Where nothing can be negated (no parameters, no body) the negative
    # strategy generates nothing, and only the positive one contributes.
    strategies = [
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    ]
    names = {p.name for p in operation.path_parameters}
    for name, values in SEEDED_PARAMETERS.items():
        if name in names:
            strategies.extend(
                operation.as_strategy(GenerationMode.POSITIVE, path_parameters={name: value})
                for value in values
            )
    return st.one_of(strategies)


def _loaded(
    result: Result[APIOperation[Any, Any, Any, Any], InvalidSchema],
) -> APIOperation[Any, Any, Any, Any]:
    """The operation, or the error that kept schemathesis from reading it."""
    if isinstance(result, Err):
        raise result.err()
    return result.ok()


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
        assert isinstance(message, str), inner
        assert message, inner


@pytest.mark.slow
def test_no_operation_answers_5xx_or_a_foreign_error_format(fuzz_stack: Stack) -> None:
    raw = fuzz_stack.client.get("/openapi.json").json()
    # No NUL characters: SQLite stores them, so here they would only cut the
    # examples short (the API refuses them for PostgreSQL's sake, which
    # test_bad_input checks on both engines). No sanitizing of the reported
    # requests: it would hide ``sort_key`` (it looks like a secret).
    config = schemathesis.Config.from_dict(
        {"generation": {"allow-x00": False}, "output": {"sanitization": {"enabled": False}}}
    )
    schema = schemathesis.openapi.from_dict(_with_hints(raw), config=config)
    operations = [_loaded(result) for result in schema.get_all_operations()]
    assert len(operations) >= 30, [op.label for op in operations]
    _seed(fuzz_stack)
    seeded = snapshot(fuzz_stack.db)
    failures: list[str] = []
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
            restore(fuzz_stack.db, seeded)
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
    assert not failures, "\n".join(failures)
