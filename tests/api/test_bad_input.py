"""Bad requests are refused in Ironic's error format and change nothing.

Every case below sends one malformed or invalid request about an enrolled
node (a fresh one, or the one the previous case proved it left unchanged)
and checks three things:

* the answer is the expected 4xx (never a 5xx), with the body clients parse:
  ``{"error_message": "<JSON string>"}`` whose inner object has a
  ``faultstring`` (``description`` for version errors, as Ironic does);
* the version headers are there, so ironicclient can still negotiate;
* the node (full GET), its port and traits, and the set of nodes and ports
  are exactly what they were before.

The module runs once per database engine: PostgreSQL refuses some values
SQLite stores (NUL characters, over-long strings), and those used to end in
500s only there. No conductor runs, so nothing else changes the node.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.api import LATEST
from tests.support.stack import Stack, start_stack
from tests.support.stack import test_settings as stack_settings

_counter = itertools.count()
_UNSET: Any = object()
MIN_HEADER = "X-OpenStack-Ironic-API-Minimum-Version"
MAX_HEADER = "X-OpenStack-Ironic-API-Maximum-Version"
BODY_LIMIT = 1024 * 1024


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def bad_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """One API (no conductor) per engine for the whole module: each test makes its own node."""
    if request.param == "sqlite":
        path: Path = tmp_path_factory.mktemp("bad-input") / "metalforge.sqlite"
        url = f"sqlite:///{path}"
    else:
        cluster = request.getfixturevalue("postgres")
        name = f"mf_bad_{os.getpid()}"
        cluster.execute(f"CREATE DATABASE {name}")
        url = cluster.url(name)
    stack = start_stack(stack_settings(url), start_conductor=False)
    assert stack.settings.api.max_request_body_size == BODY_LIMIT
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def api(bad_stack: Stack) -> TestClient:
    return bad_stack.client


@dataclass
class Subject:
    """The node (with one port and one trait) a case is about."""

    uuid: str
    name: str
    port: str
    mac: str


@dataclass
class Handover:
    """A subject the last case proved it left exactly as it found it, for the next case.

    Enrolling a node, its port and its trait for each of the module's cases
    cost a third of its time; a case that changed its subject (a failure)
    hands nothing over, and the next case enrols a fresh one.
    """

    subject: Subject | None = None


@pytest.fixture(scope="module")
def handover(bad_stack: Stack) -> Handover:
    return Handover()


@pytest.fixture
def subject(api: TestClient, handover: Handover) -> Subject:
    if handover.subject is not None:
        kept, handover.subject = handover.subject, None
        return kept
    return enrol(api)


def enrol(api: TestClient) -> Subject:
    n = next(_counter)
    name, mac = f"bad-{n}", f"52:54:01:{n // 65536 % 256:02x}:{n // 256 % 256:02x}:{n % 256:02x}"
    node = api.post(
        "/v1/nodes",
        json={
            "driver": "fake-hardware",
            "name": name,
            "extra": {"keep": "me", "nested": {"a": 1}},
            "properties": {"cpus": 4},
            "description": "a node that must not change",
        },
        headers=LATEST,
    )
    assert node.status_code == 201, node.text
    uuid = node.json()["uuid"]
    port = api.post("/v1/ports", json={"address": mac, "node_uuid": uuid}, headers=LATEST)
    assert port.status_code == 201, port.text
    trait = api.put(f"/v1/nodes/{uuid}/traits/CUSTOM_KEEP", headers=LATEST)
    assert trait.status_code == 204, trait.text
    return Subject(uuid, name, port.json()["uuid"], mac)


def _newest(api: TestClient, collection: str) -> str | None:
    params = {"sort_key": "id", "sort_dir": "desc", "limit": "1", "fields": "uuid"}
    items = api.get(f"/v1/{collection}", params=params, headers=LATEST).json()[collection]
    return items[0]["uuid"] if items else None


def snapshot(api: TestClient, subject: Subject) -> dict[str, Any]:
    """Everything a refused request must leave alone.

    The subject node and port in full; for the rest of the database, the
    newest node and port (a refused create must not have added one).
    """
    node = api.get(f"/v1/nodes/{subject.uuid}", headers=LATEST)
    assert node.status_code == 200, node.text
    state = node.json()
    # Computed from live conductors; with none running it turns None when the
    # registration ages out, which is not a change to the node.
    state.pop("conductor")
    port = api.get(f"/v1/ports/{subject.port}", headers=LATEST).json()
    return {
        "node": state,
        "port": port,
        "newest_node": _newest(api, "nodes"),
        "newest_port": _newest(api, "ports"),
    }


def assert_ironic_error(response: Any, status: int, expect: str = "") -> str:
    """``response`` is ``status`` in Ironic's error format; returns the message."""
    assert response.status_code == status, response.text[:1000]
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error_message"}, body
    assert isinstance(body["error_message"], str), body
    inner = json.loads(body["error_message"])
    if "faultstring" in inner:
        assert inner["faultcode"] == "Client", inner
        assert inner["debuginfo"] is None, inner
        message = inner["faultstring"]
    else:  # routing and version errors: Ironic's other shape
        assert inner["code"] == status, inner
        message = inner["description"]
    assert isinstance(message, str), inner
    assert message, inner
    assert expect in message, message
    return str(message)


@dataclass(frozen=True)
class Bad:
    """One bad request; ``{node}``, ``{name}``, ``{port}`` are filled from the subject."""

    method: str
    path: str
    status: int
    expect: str = ""
    json: Any = _UNSET
    content: bytes | None = None
    version: str | None = "latest"
    headers: dict[str, str] = field(default_factory=dict)
    routing_shape: bool = False
    pad: int = 0
    """``PAD`` in ``content`` becomes this many bytes, built only when sent."""


def _case(case_id: str, *args: Any, **kwargs: Any) -> Any:
    return pytest.param(Bad(*args, **kwargs), id=case_id)


N = "/v1/nodes/{node}"
JSON = {"content-type": "application/json"}

MALFORMED = [
    _case(
        "create-not-json",
        "POST",
        "/v1/nodes",
        400,
        "not valid JSON",
        content=b'{"driver": "fake-hardware"',
        headers=JSON,
    ),
    _case(
        "create-trailing-garbage",
        "POST",
        "/v1/nodes",
        400,
        "not valid JSON",
        content=b'{"driver": "fake-hardware"} x',
        headers=JSON,
    ),
    _case(
        "create-invalid-utf8",
        "POST",
        "/v1/nodes",
        400,
        content=b'{"driver": "fake-hardware", "name": "\xff\xfe"}',
        headers=JSON,
    ),
    _case("create-array", "POST", "/v1/nodes", 400, content=b"[]", headers=JSON),
    _case("create-null", "POST", "/v1/nodes", 400, content=b"null", headers=JSON),
    _case("create-empty", "POST", "/v1/nodes", 400, content=b"", headers=JSON),
    _case(
        "create-text-plain",
        "POST",
        "/v1/nodes",
        400,
        content=b'{"driver": "fake-hardware"}',
        headers={"content-type": "text/plain"},
    ),
    _case(
        "patch-not-json", "PATCH", N, 400, "not valid JSON", content=b'[{"op": "add"', headers=JSON
    ),
    _case("patch-object-not-list", "PATCH", N, 400, json={"op": "add", "path": "/extra/a"}),
    _case("patch-list-of-strings", "PATCH", N, 400, json=["/extra/a"]),
    _case(
        "provision-not-json",
        "PUT",
        N + "/states/provision",
        400,
        "not valid JSON",
        content=b"{target: manage}",
        headers=JSON,
    ),
    _case(
        "power-not-json",
        "PUT",
        N + "/states/power",
        400,
        "not valid JSON",
        content=b"power on",
        headers=JSON,
    ),
    _case(
        "traits-not-json",
        "PUT",
        N + "/traits",
        400,
        "not valid JSON",
        content=b"{'traits': []}",
        headers=JSON,
    ),
    _case(
        "maintenance-not-json",
        "PUT",
        N + "/maintenance",
        400,
        "not valid JSON",
        content=b"{",
        headers=JSON,
    ),
    _case(
        "port-not-json",
        "POST",
        "/v1/ports",
        400,
        "not valid JSON",
        content=b"address=52:54:00:aa:bb:cc",
        headers=JSON,
    ),
]

UNSTORABLE = [
    _case(
        "nan",
        "POST",
        "/v1/nodes",
        400,
        "not a valid JSON number",
        content=b'{"driver": "fake-hardware", "extra": {"a": NaN}}',
        headers=JSON,
    ),
    _case(
        "infinity",
        "POST",
        "/v1/nodes",
        400,
        "not a valid JSON number",
        content=b'{"driver": "fake-hardware", "properties": {"a": -Infinity}}',
        headers=JSON,
    ),
    _case(
        "nan-in-patch",
        "PATCH",
        N,
        400,
        "not a valid JSON number",
        content=b'[{"op": "add", "path": "/extra/a", "value": NaN}]',
        headers=JSON,
    ),
    _case(
        "lone-surrogate",
        "POST",
        "/v1/nodes",
        400,
        "not valid Unicode",
        content=b'{"driver": "fake-hardware", "extra": {"a": "\\ud800"}}',
        headers=JSON,
    ),
    _case(
        "nul-in-field",
        "POST",
        "/v1/nodes",
        400,
        "NUL",
        json={"driver": "fake-hardware", "owner": "a\x00b"},
    ),
    _case(
        "nul-in-dict-value",
        "POST",
        "/v1/nodes",
        400,
        "NUL",
        json={"driver": "fake-hardware", "extra": {"a": "\x00"}},
    ),
    _case(
        "nul-in-dict-key",
        "PATCH",
        N,
        400,
        "NUL",
        json=[{"op": "add", "path": "/extra/new", "value": {"k\x00": 1}}],
    ),
    _case(
        "nul-in-patch-value",
        "PATCH",
        N,
        400,
        "NUL",
        json=[{"op": "replace", "path": "/description", "value": "\x00"}],
    ),
    _case("nul-in-node-path", "GET", "/v1/nodes/a%00b", 400, "NUL"),
    _case("nul-in-query", "GET", "/v1/nodes?owner=a%00b", 400, "NUL"),
    _case("nul-in-marker", "GET", "/v1/nodes?marker=%00", 400, "NUL"),
    _case("nul-in-trait", "DELETE", N + "/traits/CUSTOM_A%00", 400, "NUL"),
    _case("nul-in-port-path", "GET", "/v1/ports/%00", 400, "NUL"),
    _case("nul-in-conductor", "GET", "/v1/conductors/a%00", 400, "NUL"),
    _case("nul-in-history-event", "GET", N + "/history/%00", 400, "NUL"),
    _case(
        "power-timeout-beyond-64-bits",
        "PUT",
        N + "/states/power",
        400,
        "64-bit",
        content=b'{"target": "power on", "timeout": 1' + b"0" * 400 + b"}",
        headers=JSON,
    ),
    _case(
        "configdrive-integer-beyond-64-bits",
        "PUT",
        N + "/states/provision",
        400,
        "64-bit",
        content=b'{"target": "active", "configdrive": {"meta_data": {"n": 1' + b"0" * 400 + b"}}}",
        headers=JSON,
    ),
    _case(
        "extra-nested-26-levels",
        "PATCH",
        N,
        400,
        "nested deeper than 25",
        content=b'[{"op": "add", "path": "/extra/deep", "value": '
        + b'{"a": ' * 26
        + b"1"
        + b"}" * 26
        + b"}]",
        headers=JSON,
    ),
    _case(
        "deep-nesting",
        "POST",
        "/v1/nodes",
        400,
        content=b'{"driver": "fake-hardware", "extra": {"a": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}}",
        headers=JSON,
    ),
    _case(
        "integer-too-long",
        "POST",
        "/v1/nodes",
        400,
        content=b'{"driver": "fake-hardware", "extra": {"a": ' + b"9" * 5000 + b"}}",
        headers=JSON,
    ),
]

WRONG_TYPES = [
    _case("driver-int", "POST", "/v1/nodes", 400, "driver", json={"driver": 5}),
    _case(
        "name-int", "POST", "/v1/nodes", 400, "name", json={"driver": "fake-hardware", "name": 5}
    ),
    _case(
        "extra-string",
        "POST",
        "/v1/nodes",
        400,
        "extra",
        json={"driver": "fake-hardware", "extra": "x"},
    ),
    _case(
        "maintenance-string",
        "POST",
        "/v1/nodes",
        400,
        "maintenance",
        json={"driver": "fake-hardware", "maintenance": "maybe"},
    ),
    _case(
        "network-data-list",
        "POST",
        "/v1/nodes",
        400,
        "network_data",
        json={"driver": "fake-hardware", "network_data": []},
    ),
    _case(
        "patch-name-int",
        "PATCH",
        N,
        400,
        "name",
        json=[{"op": "replace", "path": "/name", "value": 5}],
    ),
    _case(
        "patch-extra-list",
        "PATCH",
        N,
        400,
        "extra",
        json=[{"op": "replace", "path": "/extra", "value": [1]}],
    ),
    _case(
        "patch-maintenance-string",
        "PATCH",
        N,
        400,
        "maintenance",
        json=[{"op": "replace", "path": "/maintenance", "value": "maybe"}],
    ),
    _case(
        "provision-target-int", "PUT", N + "/states/provision", 400, "target", json={"target": 5}
    ),
    _case(
        "provision-clean-steps-dict",
        "PUT",
        N + "/states/provision",
        400,
        "clean_steps",
        json={"target": "clean", "clean_steps": {"interface": "deploy"}},
    ),
    _case(
        "power-timeout-string",
        "PUT",
        N + "/states/power",
        400,
        "timeout",
        json={"target": "power on", "timeout": "soon"},
    ),
    _case("traits-string", "PUT", N + "/traits", 400, "traits", json={"traits": "CUSTOM_A"}),
    _case("traits-int-item", "PUT", N + "/traits", 400, "traits", json={"traits": [1]}),
    _case("maintenance-reason-int", "PUT", N + "/maintenance", 400, "reason", json={"reason": 5}),
    _case(
        "port-pxe-string",
        "POST",
        "/v1/ports",
        400,
        "pxe_enabled",
        json={"address": "52:54:02:00:00:01", "node_uuid": "{node}", "pxe_enabled": "x"},
    ),
    _case(
        "port-patch-pxe-int",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "pxe_enabled",
        json=[{"op": "replace", "path": "/pxe_enabled", "value": 5}],
    ),
]

UNKNOWN_FIELDS = [
    _case(
        "create-unknown",
        "POST",
        "/v1/nodes",
        400,
        "'bogus' was unexpected",
        json={"driver": "fake-hardware", "bogus": 1},
    ),
    _case(
        "create-provision-state",
        "POST",
        "/v1/nodes",
        400,
        "'provision_state'",
        json={"driver": "fake-hardware", "provision_state": "active"},
    ),
    _case(
        "create-traits",
        "POST",
        "/v1/nodes",
        400,
        "'traits'",
        json={"driver": "fake-hardware", "traits": ["CUSTOM_A"]},
    ),
    _case(
        "create-protected",
        "POST",
        "/v1/nodes",
        400,
        "'protected'",
        json={"driver": "fake-hardware", "protected": True},
    ),
    _case(
        "provision-unknown",
        "PUT",
        N + "/states/provision",
        400,
        "'force' was unexpected",
        json={"target": "manage", "force": True},
    ),
    _case(
        "clean-step-unknown",
        "PUT",
        N + "/states/provision",
        400,
        "'when'",
        json={
            "target": "clean",
            "clean_steps": [{"interface": "deploy", "step": "erase_devices", "when": "now"}],
        },
    ),
    _case(
        "power-unknown",
        "PUT",
        N + "/states/power",
        400,
        "'delay'",
        json={"target": "power on", "delay": 1},
    ),
    _case(
        "traits-unknown", "PUT", N + "/traits", 400, "'mode'", json={"traits": [], "mode": "append"}
    ),
    _case(
        "patch-op-unknown-member",
        "PATCH",
        N,
        400,
        "'why'",
        json=[{"op": "add", "path": "/extra/a", "value": 1, "why": "x"}],
    ),
    _case(
        "port-unknown",
        "POST",
        "/v1/ports",
        400,
        "'mtu'",
        json={"address": "52:54:02:00:00:02", "node_uuid": "{node}", "mtu": 9000},
    ),
]

MISSING_FIELDS = [
    _case(
        "create-no-driver",
        "POST",
        "/v1/nodes",
        400,
        "'driver' is a required property",
        json={"name": "no-driver"},
    ),
    _case("provision-no-target", "PUT", N + "/states/provision", 400, "'target'", json={}),
    _case("power-no-target", "PUT", N + "/states/power", 400, "'target'", json={}),
    _case("traits-no-traits", "PUT", N + "/traits", 400, "'traits'", json={}),
    _case("port-no-address", "POST", "/v1/ports", 400, "'address'", json={"node_uuid": "{node}"}),
    _case(
        "port-no-node", "POST", "/v1/ports", 400, "node_uuid", json={"address": "52:54:02:00:00:03"}
    ),
    _case("patch-no-op", "PATCH", N, 400, "'op'", json=[{"path": "/extra/a", "value": 1}]),
    _case("patch-no-path", "PATCH", N, 400, "'path'", json=[{"op": "add", "value": 1}]),
    _case(
        "patch-empty-path", "PATCH", N, 400, "path", json=[{"op": "add", "path": "", "value": 1}]
    ),
    _case(
        "patch-add-no-value",
        "PATCH",
        N,
        400,
        "need a value",
        json=[{"op": "add", "path": "/extra/a"}],
    ),
    _case(
        "patch-replace-no-value",
        "PATCH",
        N,
        400,
        "need a value",
        json=[{"op": "replace", "path": "/extra"}],
    ),
    _case(
        "patch-move-refused",
        "PATCH",
        N,
        400,
        "'add', 'replace' or 'remove'",
        json=[{"op": "move", "from": "/driver_info/password", "path": "/extra/pw"}],
    ),
    _case(
        "patch-copy-refused",
        "PATCH",
        N,
        400,
        "'add', 'replace' or 'remove'",
        json=[{"op": "copy", "from": "/driver_info/password", "path": "/extra/pw"}],
    ),
    _case(
        "port-patch-add-no-value",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "need a value",
        json=[{"op": "add", "path": "/extra/a"}],
    ),
]

TRANSITIONS = [
    _case(
        f"{verb}-from-enroll",
        "PUT",
        N + "/states/provision",
        400,
        'while it is in state "enroll"',
        json=body,
    )
    for verb, body in [
        ("provide", {"target": "provide"}),
        ("active", {"target": "active"}),
        ("deploy", {"target": "deploy"}),
        ("deleted", {"target": "deleted"}),
        ("undeploy", {"target": "undeploy"}),
        ("inspect", {"target": "inspect"}),
        ("abort", {"target": "abort"}),
        ("rebuild", {"target": "rebuild"}),
        ("adopt", {"target": "adopt"}),
        ("unrescue", {"target": "unrescue"}),
        ("unhold", {"target": "unhold"}),
        ("rescue", {"target": "rescue", "rescue_password": "pw"}),
    ]
] + [
    _case(
        "unknown-verb",
        "PUT",
        N + "/states/provision",
        400,
        "Invalid provision state target",
        json={"target": "explode"},
    ),
    _case(
        "state-name-as-verb",
        "PUT",
        N + "/states/provision",
        400,
        "manageable",
        json={"target": "manageable"},
    ),
    _case(
        "clean-without-steps",
        "PUT",
        N + "/states/provision",
        400,
        '"clean_steps"',
        json={"target": "clean"},
    ),
    _case(
        "clean-empty-steps",
        "PUT",
        N + "/states/provision",
        400,
        '"clean_steps"',
        json={"target": "clean", "clean_steps": []},
    ),
    _case(
        "clean-bad-interface",
        "PUT",
        N + "/states/provision",
        400,
        "interface",
        json={"target": "clean", "clean_steps": [{"interface": "disk", "step": "wipe"}]},
    ),
    _case(
        "clean-steps-with-manage",
        "PUT",
        N + "/states/provision",
        400,
        '"clean_steps"',
        json={"target": "manage", "clean_steps": [{"interface": "deploy", "step": "x"}]},
    ),
    _case(
        "deploy-steps-with-manage",
        "PUT",
        N + "/states/provision",
        400,
        '"deploy_steps"',
        json={
            "target": "manage",
            "deploy_steps": [{"interface": "deploy", "step": "x", "args": {}, "priority": 1}],
        },
    ),
    _case(
        "deploy-step-missing-priority",
        "PUT",
        N + "/states/provision",
        400,
        "priority",
        json={
            "target": "active",
            "deploy_steps": [{"interface": "deploy", "step": "x", "args": {}}],
        },
    ),
    _case(
        "configdrive-with-manage",
        "PUT",
        N + "/states/provision",
        400,
        "config drive",
        json={"target": "manage", "configdrive": "H4sIAAAA"},
    ),
    _case(
        "configdrive-unknown-key",
        "PUT",
        N + "/states/provision",
        400,
        "configdrive",
        json={"target": "active", "configdrive": {"kernel": "x"}},
    ),
    _case(
        "configdrive-meta-data-not-an-object",
        "PUT",
        N + "/states/provision",
        400,
        "Invalid configdrive format: meta_data must be an object",
        json={"target": "active", "configdrive": {"meta_data": ["x"]}},
    ),
    _case(
        "configdrive-user-data-a-number",
        "PUT",
        N + "/states/provision",
        400,
        "Invalid configdrive format: user_data",
        json={"target": "active", "configdrive": {"user_data": 5}},
    ),
    _case(
        "rescue-without-password",
        "PUT",
        N + "/states/provision",
        400,
        "rescue_password",
        json={"target": "rescue"},
    ),
    _case(
        "disable-ramdisk-with-manage",
        "PUT",
        N + "/states/provision",
        400,
        '"disable_ramdisk"',
        json={"target": "manage", "disable_ramdisk": True},
    ),
    _case(
        "manage-below-1.4",
        "PUT",
        N + "/states/provision",
        406,
        "1.3",
        json={"target": "manage"},
        version="1.3",
    ),
    _case(
        "clean-below-1.15",
        "PUT",
        N + "/states/provision",
        406,
        json={"target": "clean", "clean_steps": [{"interface": "deploy", "step": "x"}]},
        version="1.14",
    ),
    _case(
        "deploy-verb-below-1.73",
        "PUT",
        N + "/states/provision",
        406,
        json={"target": "deploy"},
        version="1.72",
    ),
    _case(
        "power-unknown-target",
        "PUT",
        N + "/states/power",
        400,
        "Invalid power state target",
        json={"target": "power sideways"},
    ),
    _case(
        "power-timeout-zero",
        "PUT",
        N + "/states/power",
        400,
        "timeout",
        json={"target": "power on", "timeout": 0},
    ),
    _case(
        "soft-power-below-1.27",
        "PUT",
        N + "/states/power",
        406,
        "1.27",
        json={"target": "soft power off"},
        version="1.26",
    ),
    _case(
        "power-timeout-below-1.27",
        "PUT",
        N + "/states/power",
        406,
        "1.27",
        json={"target": "power on", "timeout": 10},
        version="1.26",
    ),
]

TRAITS = [
    _case(f"trait-{label}", "PUT", N + f"/traits/{trait}", 400, "Invalid trait")
    for label, trait in [
        ("lowercase", "custom_lower"),
        ("no-suffix", "CUSTOM_"),
        ("dash", "CUSTOM_A-B"),
        ("unknown-standard", "HW_CPU_X86_NOT_A_THING"),
        ("too-long", "CUSTOM_" + "A" * 249),
    ]
] + [
    _case(
        "traits-list-one-bad",
        "PUT",
        N + "/traits",
        400,
        "Invalid trait",
        json={"traits": ["CUSTOM_OK", "nope"]},
    ),
    _case(
        "traits-too-many",
        "PUT",
        N + "/traits",
        400,
        "traits",
        json={"traits": [f"CUSTOM_T{i}" for i in range(51)]},
    ),
    _case(
        "trait-with-body",
        "PUT",
        N + "/traits/CUSTOM_NEW",
        400,
        "No body",
        json={"trait": "CUSTOM_NEW"},
    ),
    _case(
        "trait-delete-missing", "DELETE", N + "/traits/CUSTOM_MISSING", 404, "doesn't have a trait"
    ),
    _case("traits-below-1.37", "GET", N + "/traits", 406, version="1.36"),
    _case("traits-put-below-1.37", "PUT", N + "/traits", 405, json={"traits": []}, version="1.36"),
    _case("traits-delete-below-1.37", "DELETE", N + "/traits", 404, version="1.36"),
]

AGENT_BODY_LIMIT = 64 * 1024

OVERSIZED = [
    _case(
        "allocation-51-traits",
        "POST",
        "/v1/allocations",
        400,
        "traits",
        json={"resource_class": "x", "traits": [f"CUSTOM_T{i}" for i in range(51)]},
    ),
    _case(
        "allocation-trait-256",
        "POST",
        "/v1/allocations",
        400,
        "traits",
        json={"resource_class": "x", "traits": ["CUSTOM_" + "T" * 249]},
    ),
    _case(
        "allocation-10001-candidates",
        "POST",
        "/v1/allocations",
        400,
        "candidate_nodes",
        json={"resource_class": "x", "candidate_nodes": [f"n{i}" for i in range(10_001)]},
    ),
    _case(
        "allocation-candidate-256",
        "POST",
        "/v1/allocations",
        400,
        "candidate_nodes",
        json={"resource_class": "x", "candidate_nodes": ["n" * 256]},
    ),
    _case(
        "power-timeout-over-a-day",
        "PUT",
        N + "/states/power",
        400,
        "timeout",
        json={"target": "power on", "timeout": 86_401},
    ),
    _case(
        "heartbeat-nul",
        "POST",
        "/v1/heartbeat/{node}",
        400,
        "NUL characters",
        json={
            "callback_url": "http://192.0.2.1:9999",
            "agent_token": "t",
            "agent_status_message": "a\u0000b",
        },
    ),
    _case(
        "heartbeat-over-the-agent-limit",
        "POST",
        "/v1/heartbeat/{node}",
        413,
        f"limit of {AGENT_BODY_LIMIT} bytes",
        content=b'{"callback_url": "http://192.0.2.1:9999", "pad": "PAD"}',
        pad=AGENT_BODY_LIMIT,
        headers=JSON,
    ),
    _case(
        "create-name-256",
        "POST",
        "/v1/nodes",
        400,
        "name",
        json={"driver": "fake-hardware", "name": "n" * 256},
    ),
    _case(
        "create-description-4097",
        "POST",
        "/v1/nodes",
        400,
        "description",
        json={"driver": "fake-hardware", "description": "d" * 4097},
    ),
    _case(
        "create-resource-class-81",
        "POST",
        "/v1/nodes",
        400,
        "resource_class",
        json={"driver": "fake-hardware", "resource_class": "r" * 81},
    ),
    _case(
        "create-owner-256",
        "POST",
        "/v1/nodes",
        400,
        "owner",
        json={"driver": "fake-hardware", "owner": "o" * 256},
    ),
    _case(
        "patch-name-256",
        "PATCH",
        N,
        400,
        "name",
        json=[{"op": "replace", "path": "/name", "value": "n" * 256}],
    ),
    _case(
        "patch-description-4097",
        "PATCH",
        N,
        400,
        "description",
        json=[{"op": "replace", "path": "/description", "value": "d" * 4097}],
    ),
    _case(
        "patch-resource-class-81",
        "PATCH",
        N,
        400,
        "resource_class",
        json=[{"op": "add", "path": "/resource_class", "value": "r" * 81}],
    ),
    _case(
        "patch-owner-256",
        "PATCH",
        N,
        400,
        "owner",
        json=[{"op": "replace", "path": "/owner", "value": "o" * 256}],
    ),
    _case(
        "patch-shard-256",
        "PATCH",
        N,
        400,
        "shard",
        json=[{"op": "replace", "path": "/shard", "value": "s" * 256}],
    ),
    _case(
        "patch-conductor-group-256",
        "PATCH",
        N,
        400,
        "conductor_group",
        json=[{"op": "replace", "path": "/conductor_group", "value": "g" * 256}],
    ),
    _case(
        "port-physical-network-65",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "physical_network",
        json=[{"op": "replace", "path": "/physical_network", "value": "p" * 65}],
    ),
    _case(
        "port-category-81",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "category",
        json=[{"op": "replace", "path": "/category", "value": "c" * 81}],
    ),
    _case(
        "maintenance-reason-4097",
        "PUT",
        N + "/maintenance",
        400,
        "reason",
        json={"reason": "r" * 4097},
    ),
    _case(
        "huge-body",
        "POST",
        "/v1/nodes",
        413,
        "larger than the limit",
        content=b'{"driver": "fake-hardware", "extra": {"a": "PAD"}}',
        pad=BODY_LIMIT,
        headers=JSON,
    ),
    _case(
        "huge-patch",
        "PATCH",
        N,
        413,
        "larger than the limit",
        content=b'[{"op": "add", "path": "/extra/a", "value": "PAD"}]',
        pad=BODY_LIMIT,
        headers=JSON,
    ),
]

IDENTIFIERS = [
    _case(
        "create-bad-uuid",
        "POST",
        "/v1/nodes",
        400,
        "Expected UUID for uuid: not-a-uuid",
        json={"driver": "fake-hardware", "uuid": "not-a-uuid"},
    ),
    _case(
        "create-uuid-int",
        "POST",
        "/v1/nodes",
        400,
        "uuid",
        json={"driver": "fake-hardware", "uuid": 12345},
    ),
    _case(
        "create-bad-instance-uuid",
        "POST",
        "/v1/nodes",
        400,
        "instance_uuid",
        json={"driver": "fake-hardware", "instance_uuid": "instance-1"},
    ),
    _case(
        "create-bad-chassis-uuid",
        "POST",
        "/v1/nodes",
        400,
        "chassis_uuid",
        json={"driver": "fake-hardware", "chassis_uuid": "1234"},
    ),
    _case(
        "create-bad-parent-node",
        "POST",
        "/v1/nodes",
        400,
        "parent_node",
        json={"driver": "fake-hardware", "parent_node": "zzz"},
    ),
    _case(
        "create-duplicate-uuid",
        "POST",
        "/v1/nodes",
        409,
        "already exists",
        json={"driver": "fake-hardware", "uuid": "{node}"},
    ),
    _case(
        "create-duplicate-name",
        "POST",
        "/v1/nodes",
        409,
        "already exists",
        json={"driver": "fake-hardware", "name": "{name}"},
    ),
    _case(
        "create-uuid-like-name",
        "POST",
        "/v1/nodes",
        400,
        "logical name",
        json={"driver": "fake-hardware", "name": "1be26c0b-03f2-4d23-9c0f-ad0a1b2c3d4e"},
    ),
    _case(
        "create-reserved-name",
        "POST",
        "/v1/nodes",
        400,
        "reserved",
        json={"driver": "fake-hardware", "name": "maintenance"},
    ),
    _case(
        "create-name-with-space",
        "POST",
        "/v1/nodes",
        400,
        "logical name",
        json={"driver": "fake-hardware", "name": "my node"},
    ),
    _case(
        "create-unknown-driver",
        "POST",
        "/v1/nodes",
        400,
        "No valid host",
        json={"driver": "ipmi-but-not-here"},
    ),
    _case(
        "create-unknown-interface",
        "POST",
        "/v1/nodes",
        400,
        "deploy interface",
        json={"driver": "fake-hardware", "deploy_interface": "warp"},
    ),
    _case(
        "create-conductor-group-space",
        "POST",
        "/v1/nodes",
        400,
        "conductor_group",
        json={"driver": "fake-hardware", "conductor_group": "a b"},
    ),
    _case(
        "patch-bad-instance-uuid",
        "PATCH",
        N,
        400,
        "instance_uuid",
        json=[{"op": "add", "path": "/instance_uuid", "value": "instance-1"}],
    ),
    _case(
        "patch-reserved-name",
        "PATCH",
        N,
        400,
        "reserved",
        json=[{"op": "replace", "path": "/name", "value": "detail"}],
    ),
    _case(
        "patch-unknown-driver",
        "PATCH",
        N,
        400,
        "No valid host",
        json=[{"op": "replace", "path": "/driver", "value": "ipmi-but-not-here"}],
    ),
    _case("patch-remove-driver", "PATCH", N, 400, json=[{"op": "remove", "path": "/driver"}]),
    _case(
        "missing-node-uuid",
        "GET",
        "/v1/nodes/1be26c0b-03f2-4d23-9c0f-000000000000",
        404,
        "could not be found",
    ),
    _case(
        "malformed-uuid-is-a-name",
        "GET",
        "/v1/nodes/1be26c0b-03f2-4d23-9c0f-zzzzzzzzzzzz",
        404,
        "could not be found",
    ),
    _case("name-below-1.5", "GET", "/v1/nodes/{name}", 404, "could not be found", version="1.4"),
    _case(
        "port-bad-uuid",
        "POST",
        "/v1/ports",
        400,
        "Expected UUID for uuid: zzz",
        json={"address": "52:54:02:00:00:04", "node_uuid": "{node}", "uuid": "zzz"},
    ),
    _case(
        "port-unknown-node",
        "POST",
        "/v1/ports",
        400,
        "could not be found",
        json={"address": "52:54:02:00:00:05", "node_uuid": "1be26c0b-03f2-4d23-9c0f-0"},
    ),
    _case(
        "port-both-node-keys",
        "POST",
        "/v1/ports",
        400,
        "Exactly one",
        json={"address": "52:54:02:00:00:06", "node_uuid": "{node}", "node_ident": "{name}"},
    ),
    _case(
        "port-patch-unknown-node",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "could not be found",
        json=[{"op": "replace", "path": "/node_uuid", "value": "no-such-node"}],
    ),
    _case(
        "port-patch-remove-node",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "node_uuid",
        json=[{"op": "remove", "path": "/node_uuid"}],
    ),
    _case("missing-port", "GET", "/v1/ports/1be26c0b-03f2-4d23-9c0f-000000000000", 404),
    _case("missing-history-event", "GET", N + "/history/nope", 404),
    _case("missing-driver", "GET", "/v1/drivers/ipmi-but-not-here", 404),
    _case("missing-conductor", "GET", "/v1/conductors/nowhere", 404),
]

MACS = [
    _case(
        f"mac-{label}",
        "POST",
        "/v1/ports",
        400,
        "MAC address",
        json={"address": mac, "node_uuid": "{node}"},
    )
    for label, mac in [
        ("garbage", "zz"),
        ("five-octets", "52:54:00:00:00"),
        ("seven-octets", "52:54:00:00:00:00:01"),
        ("not-hex", "52:54:00:00:00:0g"),
        ("no-separators", "525400000001"),
    ]
] + [
    _case(
        "mac-empty",
        "POST",
        "/v1/ports",
        400,
        "address",
        json={"address": "", "node_uuid": "{node}"},
    ),
    _case(
        "mac-int", "POST", "/v1/ports", 400, "address", json={"address": 5, "node_uuid": "{node}"}
    ),
    _case(
        "mac-duplicate",
        "POST",
        "/v1/ports",
        409,
        "already exists",
        json={"address": "{mac}", "node_uuid": "{node}"},
    ),
    _case(
        "mac-patch-garbage",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "MAC address",
        json=[{"op": "replace", "path": "/address", "value": "nope"}],
    ),
    _case(
        "mac-patch-remove",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "MAC address",
        json=[{"op": "remove", "path": "/address"}],
    ),
]

QUERIES = [
    _case(f"bool-{param}-{value}", "GET", f"/v1/nodes?{param}={value}", 400, "not a valid boolean")
    for param, value in [
        ("maintenance", "maybe"),
        ("associated", "2"),
        ("detail", "yess"),
        ("include_children", "truee"),
        ("retired", "-1"),
    ]
] + [
    _case("bool-ports-detail", "GET", "/v1/ports?detail=x", 400, "not a valid boolean"),
    _case(
        "bool-reset-interfaces",
        "PATCH",
        N + "?reset_interfaces=perhaps",
        400,
        "not a valid boolean",
        json=[{"op": "add", "path": "/extra/a", "value": 1}],
    ),
    _case("unknown-param-list", "GET", "/v1/nodes?bogus=1", 400, "Unexpected arguments: bogus"),
    _case(
        "unknown-params-sorted",
        "GET",
        "/v1/nodes?zeta=1&alpha=2",
        400,
        "Unexpected arguments: alpha, zeta",
    ),
    _case(
        "unknown-param-detail",
        "GET",
        "/v1/nodes/detail?bogus=1",
        400,
        "Unexpected arguments: bogus",
    ),
    _case("unknown-param-show", "GET", N + "?bogus=1", 400, "Unexpected arguments: bogus"),
    _case(
        "unknown-param-patch",
        "PATCH",
        N + "?bogus=1",
        400,
        "Unexpected arguments: bogus",
        json=[{"op": "add", "path": "/extra/a", "value": 1}],
    ),
    _case("unknown-param-ports", "GET", "/v1/ports?bogus=1", 400, "Unexpected arguments: bogus"),
    _case(
        "unknown-param-history", "GET", N + "/history?bogus=1", 400, "Unexpected arguments: bogus"
    ),
    _case(
        "unknown-param-conductors",
        "GET",
        "/v1/conductors?bogus=1",
        400,
        "Unexpected arguments: bogus",
    ),
    _case(
        "unknown-param-drivers", "GET", "/v1/drivers?bogus=1", 400, "Unexpected arguments: bogus"
    ),
    _case(
        "detail-path-rejects-fields",
        "GET",
        "/v1/nodes/detail?fields=uuid",
        400,
        "Unexpected arguments: fields",
    ),
    _case("bad-provision-state-filter", "GET", "/v1/nodes?provision_state=flying", 400, "flying"),
    _case("bad-fault-filter", "GET", "/v1/nodes?fault=bad+luck", 400, "fault"),
    _case(
        "fields-with-detail",
        "GET",
        "/v1/nodes?fields=uuid&detail=True",
        400,
        "detail=True and fields",
    ),
    _case(
        "unknown-marker",
        "GET",
        "/v1/nodes?marker=1be26c0b-03f2-4d23-9c0f-000000000000",
        400,
        "Marker",
    ),
    _case("unknown-port-marker", "GET", "/v1/ports?marker=nope", 400, "Marker"),
    _case("ports-unknown-node-filter", "GET", "/v1/ports?node=no-such-node", 404),
]

LIMITS = [
    _case(f"limit-{where}-{value}", "GET", f"{path}?limit={value}", 400, expect)
    for where, path in [
        ("nodes", "/v1/nodes"),
        ("detail", "/v1/nodes/detail"),
        ("ports", "/v1/ports"),
        ("conductors", "/v1/conductors"),
        ("history", N + "/history"),
        ("allocations", "/v1/allocations"),
        ("templates", "/v1/deploy_templates"),
        ("runbooks", "/v1/runbooks"),
    ]
    for value, expect in [
        ("0", "Limit must be positive"),
        ("-1", "Limit must be positive"),
        ("ten", "not an integer"),
        ("1.5", "not an integer"),
    ]
]

SORTING = [
    _case(f"sort-key-{key}", "GET", f"/v1/nodes?sort_key={key}", 400, "invalid field for sorting")
    for key in ("bogus", "properties", "driver_info", "traits", "extra", "epoch")
] + [
    _case("sort-dir-up", "GET", "/v1/nodes?sort_dir=up", 400, "Invalid sort direction"),
    _case("ports-sort-key", "GET", "/v1/ports?sort_key=extra", 400, "invalid field for sorting"),
    _case("ports-sort-dir", "GET", "/v1/ports?sort_dir=down", 400, "Invalid sort direction"),
    _case(
        "conductors-sort-key",
        "GET",
        "/v1/conductors?sort_key=drivers",
        400,
        "invalid field for sorting",
    ),
]

FIELDS = [
    _case("fields-unknown", "GET", "/v1/nodes?fields=bogus", 400, "bogus is not a valid field"),
    _case(
        "fields-one-unknown",
        "GET",
        "/v1/nodes?fields=uuid,bogus",
        400,
        "bogus is not a valid field",
    ),
    _case("fields-show-unknown", "GET", N + "?fields=bogus", 400, "not a valid field"),
    _case("fields-ports-unknown", "GET", "/v1/ports?fields=bogus", 400, "not a valid field"),
    _case(
        "fields-conductors-unknown", "GET", "/v1/conductors?fields=bogus", 400, "not a valid field"
    ),
    _case("fields-below-1.8", "GET", "/v1/nodes?fields=uuid", 406, version="1.7"),
    _case("fields-traits-below-1.37", "GET", N + "?fields=traits", 406, "traits", version="1.36"),
    _case(
        "fields-owner-below-1.50",
        "GET",
        "/v1/nodes?fields=uuid,owner",
        406,
        "owner",
        version="1.49",
    ),
    _case(
        "fields-port-name-below-1.88", "GET", "/v1/ports?fields=name", 406, "name", version="1.87"
    ),
    _case(
        "filter-resource-class-below-1.21",
        "GET",
        "/v1/nodes?resource_class=x",
        406,
        "resource_class",
        version="1.20",
    ),
    _case("filter-owner-below-1.50", "GET", "/v1/nodes?owner=x", 406, "owner", version="1.49"),
    _case("detail-below-1.43", "GET", "/v1/nodes?detail=True", 406, "detail", version="1.42"),
    _case(
        "create-owner-below-1.50",
        "POST",
        "/v1/nodes",
        406,
        "owner",
        json={"driver": "fake-hardware", "owner": "me"},
        version="1.49",
    ),
    _case(
        "create-name-below-1.5",
        "POST",
        "/v1/nodes",
        406,
        "name",
        json={"driver": "fake-hardware", "name": "early"},
        version="1.4",
    ),
    _case(
        "patch-description-below-1.51",
        "PATCH",
        N,
        406,
        "description",
        json=[{"op": "replace", "path": "/description", "value": "x"}],
        version="1.50",
    ),
    _case(
        "port-name-below-1.88",
        "POST",
        "/v1/ports",
        406,
        "name",
        json={"address": "52:54:02:00:00:07", "node_uuid": "{node}", "name": "p"},
        version="1.87",
    ),
    _case(
        "port-node-ident-below-1.94",
        "POST",
        "/v1/ports",
        406,
        "node_ident",
        json={"address": "52:54:02:00:00:08", "node_ident": "{name}"},
        version="1.93",
    ),
]

PATCHES = [
    _case(
        f"not-patchable-{target}",
        "PATCH",
        N,
        400,
        f"Cannot patch /{target}",
        json=[{"op": "replace", "path": f"/{target}", "value": "x"}],
    )
    for target in (
        "uuid",
        "provision_state",
        "power_state",
        "created_at",
        "reservation",
        "id",
        "conductor",
        "allocation_uuid",
        "last_error",
        "links",
    )
] + [
    _case(
        "not-patchable-traits",
        "PATCH",
        N,
        400,
        "node traits API",
        json=[{"op": "add", "path": "/traits", "value": ["CUSTOM_A"]}],
    ),
    _case(
        "not-patchable-traits-item",
        "PATCH",
        N,
        400,
        "node traits API",
        json=[{"op": "add", "path": "/traits/-", "value": "CUSTOM_A"}],
    ),
    _case(
        "add-unknown-root",
        "PATCH",
        N,
        400,
        "Cannot patch /bogus",
        json=[{"op": "add", "path": "/bogus", "value": 1}],
    ),
    _case(
        "remove-missing-key",
        "PATCH",
        N,
        400,
        "Couldn't apply patch",
        json=[{"op": "remove", "path": "/extra/missing"}],
    ),
    _case(
        "remove-missing-nested-key",
        "PATCH",
        N,
        400,
        "Couldn't apply patch",
        json=[{"op": "remove", "path": "/extra/nested/missing"}],
    ),
    _case(
        "replace-missing-key",
        "PATCH",
        N,
        400,
        "Couldn't apply patch",
        json=[{"op": "replace", "path": "/properties/memory_mb", "value": 1}],
    ),
    _case(
        "add-under-missing-parent",
        "PATCH",
        N,
        400,
        "Couldn't apply patch",
        json=[{"op": "add", "path": "/extra/missing/child", "value": 1}],
    ),
    _case(
        "add-under-a-string",
        "PATCH",
        N,
        400,
        "Couldn't apply patch",
        json=[{"op": "add", "path": "/description/x", "value": 1}],
    ),
    _case(
        "add-under-missing-instance-info",
        "PATCH",
        N,
        400,
        "Couldn't apply patch",
        json=[{"op": "add", "path": "/instance_info/image/source", "value": "x"}],
    ),
    _case(
        "invalid-escape",
        "PATCH",
        N,
        400,
        "Couldn't apply patch",
        json=[{"op": "add", "path": "/extra/a~2b", "value": 1}],
    ),
    _case(
        "dangling-escape",
        "PATCH",
        N,
        400,
        "Couldn't apply patch",
        json=[{"op": "add", "path": "/extra/a~", "value": 1}],
    ),
    _case(
        "path-without-slash", "PATCH", N, 400, json=[{"op": "add", "path": "extra/a", "value": 1}]
    ),
    _case("unknown-op", "PATCH", N, 400, "op", json=[{"op": "merge", "path": "/extra"}]),
    _case(
        "test-op-refused",
        "PATCH",
        N,
        400,
        "'add', 'replace' or 'remove'",
        json=[{"op": "test", "path": "/extra/keep", "value": "someone else"}],
    ),
    _case(
        "second-op-fails",
        "PATCH",
        N,
        400,
        "Couldn't apply patch",
        json=[
            {"op": "add", "path": "/extra/first", "value": 1},
            {"op": "remove", "path": "/extra/missing"},
        ],
    ),
    _case(
        "second-op-not-patchable",
        "PATCH",
        N,
        400,
        "Cannot patch /uuid",
        json=[
            {"op": "add", "path": "/extra/first", "value": 1},
            {"op": "replace", "path": "/uuid", "value": "x"},
        ],
    ),
    _case(
        "port-not-patchable",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "Cannot patch /uuid",
        json=[{"op": "replace", "path": "/uuid", "value": "x"}],
    ),
    _case(
        "port-remove-missing-key",
        "PATCH",
        "/v1/ports/{port}",
        400,
        "Couldn't apply patch",
        json=[{"op": "remove", "path": "/extra/missing"}],
    ),
]

ROUTING = [
    _case("unknown-collection", "GET", "/v1/widgets/x", 404, routing_shape=True),
    _case("unknown-sub-resource", "GET", N + "/widgets", 404, routing_shape=True),
    _case("delete-collection", "DELETE", "/v1/nodes", 405, routing_shape=True),
    _case("post-to-node", "POST", N, 405, routing_shape=True, json={"driver": "fake-hardware"}),
    _case("post-to-v1", "POST", "/v1", 405, routing_shape=True, json={}),
    _case("put-root", "PUT", "/", 405, routing_shape=True, json={}),
]

_STEP = {"interface": "bios", "step": "apply_configuration", "args": {}, "priority": 10}

CLIENT_MATCHED = [
    # The words python-ironicclient's functional tests match in Ironic's answers.
    _case(
        "allocation-resource-class-too-long",
        "POST",
        "/v1/allocations",
        400,
        "is too long",
        json={"resource_class": "x" * 81},
    ),
    _case(
        "allocation-trait-not-a-trait",
        "POST",
        "/v1/allocations",
        400,
        "'foo' does not match '^CUSTOM_[A-Z0-9_]+$'",
        json={"resource_class": "rc", "traits": ["foo"]},
    ),
    _case(
        "allocation-candidate-unknown",
        "POST",
        "/v1/allocations",
        400,
        "Nodes cannot be found: banana?",
        json={"resource_class": "rc", "candidate_nodes": ["banana?"]},
    ),
    _case(
        "template-name-not-a-trait",
        "POST",
        "/v1/deploy_templates",
        400,
        "'not/a/name' does not match",
        json={"name": "not/a/name", "steps": [_STEP]},
    ),
    _case(
        "template-without-steps",
        "POST",
        "/v1/deploy_templates",
        400,
        "[] is too short",
        json={"name": "CUSTOM_X", "steps": []},
    ),
]

CASES = [
    *CLIENT_MATCHED,
    *MALFORMED,
    *UNSTORABLE,
    *WRONG_TYPES,
    *UNKNOWN_FIELDS,
    *MISSING_FIELDS,
    *TRANSITIONS,
    *TRAITS,
    *OVERSIZED,
    *IDENTIFIERS,
    *MACS,
    *QUERIES,
    *LIMITS,
    *SORTING,
    *FIELDS,
    *PATCHES,
    *ROUTING,
]


def _fill(value: Any, subject: Subject) -> Any:
    if isinstance(value, str):
        return (
            value.format(node=subject.uuid, name=subject.name, port=subject.port, mac=subject.mac)
            if "{" in value
            else value
        )
    if isinstance(value, list):
        return [_fill(v, subject) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, subject) for k, v in value.items()}
    return value


def send(api: TestClient, case: Bad, subject: Subject) -> Any:
    headers = dict(case.headers)
    if case.version is not None:
        headers["X-OpenStack-Ironic-API-Version"] = case.version
    kwargs: dict[str, Any] = {"headers": headers}
    if case.json is not _UNSET:
        kwargs["json"] = _fill(case.json, subject)
    elif case.content is not None:
        kwargs["content"] = (
            case.content.replace(b"PAD", b"x" * case.pad) if case.pad else case.content
        )
    return api.request(case.method, _fill(case.path, subject), **kwargs)


@pytest.mark.parametrize("case", CASES)
def test_bad_request_is_refused_and_changes_nothing(
    api: TestClient, subject: Subject, handover: Handover, case: Bad
) -> None:
    before = snapshot(api, subject)
    response = send(api, case, subject)
    assert_ironic_error(response, case.status, case.expect)
    inner = json.loads(response.json()["error_message"])
    assert ("description" in inner) == case.routing_shape, inner
    assert response.headers[MIN_HEADER] == "1.1"
    assert response.headers[MAX_HEADER]
    assert snapshot(api, subject) == before
    handover.subject = subject  # proved unchanged


def test_streamed_body_over_the_limit_is_refused(api: TestClient, subject: Subject) -> None:
    """Without ``Content-Length`` the limit is enforced while the body is read."""
    before = snapshot(api, subject)
    chunk = b"x" * (1024 * 1024)

    def body() -> Iterator[bytes]:
        yield b'{"driver": "fake-hardware", "extra": {"a": "'
        for _ in range(BODY_LIMIT // len(chunk) + 1):
            yield chunk
        yield b'"}}'

    response = api.post("/v1/nodes", content=body(), headers={**LATEST, **JSON})
    assert_ironic_error(response, 413, "larger than the limit")
    assert snapshot(api, subject) == before


@pytest.mark.parametrize(
    ("headers", "parsable"),
    [
        pytest.param({"X-OpenStack-Ironic-API-Version": "1.200"}, True, id="minor-too-high"),
        pytest.param({"X-OpenStack-Ironic-API-Version": "2.1"}, True, id="major-2"),
        pytest.param({"X-OpenStack-Ironic-API-Version": "1.0"}, True, id="below-minimum"),
        pytest.param({"X-OpenStack-Ironic-API-Version": "0.9"}, True, id="major-0"),
        pytest.param({"X-OpenStack-Ironic-API-Version": "1." + "9" * 5000}, True, id="minor-huge"),
        pytest.param({"OpenStack-API-Version": "baremetal 1.999"}, True, id="standard-too-high"),
        pytest.param(
            {"OpenStack-API-Version": "baremetal 1.999", "X-OpenStack-Ironic-API-Version": "1.5"},
            True,
            id="standard-wins-even-when-bad",
        ),
        pytest.param({"X-OpenStack-Ironic-API-Version": "abc"}, False, id="garbage"),
        pytest.param({"X-OpenStack-Ironic-API-Version": "1.5.3"}, False, id="three-parts"),
        pytest.param({"X-OpenStack-Ironic-API-Version": "1."}, False, id="no-minor"),
        pytest.param({"X-OpenStack-Ironic-API-Version": ""}, False, id="empty"),
        pytest.param({"X-OpenStack-Ironic-API-Version": "newest"}, False, id="not-latest"),
        pytest.param({"OpenStack-API-Version": "baremetal one"}, False, id="standard-garbage"),
    ],
)
@pytest.mark.parametrize("path", ["/", "/v1/nodes", N + "/states/provision"])
def test_bad_version_header_is_406(
    api: TestClient,
    subject: Subject,
    handover: Handover,
    headers: dict[str, str],
    parsable: bool,
    path: str,
) -> None:
    """406 for any version problem; only a parsable one gets the range headers back.

    Even a PUT is refused before its body is looked at, and changes nothing.
    """
    before = snapshot(api, subject)
    url = _fill(path, subject)
    if path.endswith("/provision"):
        response = api.put(url, json={"target": "manage"}, headers=headers)
    else:
        response = api.get(url, headers=headers)
    message = assert_ironic_error(response, 406)
    assert "X-OpenStack-Ironic-API-Version" not in response.headers
    if parsable:
        assert response.headers[MIN_HEADER] == "1.1"
        assert response.headers[MAX_HEADER]
        assert "version range" in message
    else:
        assert MIN_HEADER not in response.headers
        assert MAX_HEADER not in response.headers
    assert snapshot(api, subject) == before
    handover.subject = subject  # proved unchanged


def test_json_pointer_escapes_are_decoded(api: TestClient, subject: Subject) -> None:
    """The valid counterpart of the escape cases: ``~1`` is ``/`` and ``~0`` is ``~``."""
    response = api.patch(
        f"/v1/nodes/{subject.uuid}",
        json=[
            {"op": "add", "path": "/extra/a~1b", "value": 1},
            {"op": "add", "path": "/extra/c~0d", "value": 2},
        ],
        headers=LATEST,
    )
    assert response.status_code == 200, response.text
    assert response.json()["extra"] == {"keep": "me", "nested": {"a": 1}, "a/b": 1, "c~d": 2}
    removed = api.patch(
        f"/v1/nodes/{subject.uuid}",
        json=[{"op": "remove", "path": "/extra/a~1b"}, {"op": "remove", "path": "/extra/c~0d"}],
        headers=LATEST,
    )
    assert removed.status_code == 200, removed.text
    assert removed.json()["extra"] == {"keep": "me", "nested": {"a": 1}}


@pytest.mark.parametrize("sort_key", ["fault", "owner", "maintenance", "name", "updated_at"])
@pytest.mark.parametrize("sort_dir", ["asc", "desc"])
def test_marker_on_a_null_or_boolean_sort_key_pages_through_everything(
    api: TestClient, sort_key: str, sort_dir: str
) -> None:
    """Paging used to be a 500 when the marker's sort value was NULL or a boolean.

    Seven nodes, some with NULLs, some with equal values, all of one resource
    class: walking the pages with ``limit=2`` visits each exactly once, in order.
    """
    group = f"paging-{next(_counter)}"
    created = []
    for i in range(7):
        body: dict[str, Any] = {"driver": "fake-hardware", "resource_class": group}
        if i % 2:
            body.update(name=f"{group}-{i % 3}", owner=f"owner-{i % 3}")
        response = api.post("/v1/nodes", json=body, headers=LATEST)
        assert response.status_code == 201, response.text
        created.append(response.json()["uuid"])
        if i % 3 == 0:
            patched = api.patch(
                f"/v1/nodes/{created[-1]}",
                json=[{"op": "replace", "path": "/maintenance", "value": True}],
                headers=LATEST,
            )
            assert patched.status_code == 200, patched.text
    params = {"resource_class": group, "sort_key": sort_key, "sort_dir": sort_dir}
    everything = api.get("/v1/nodes", params=params, headers=LATEST).json()["nodes"]
    seen: list[str] = []
    marker: str | None = None
    for _ in range(len(created)):
        paged = {**params, "limit": "2", **({"marker": marker} if marker else {})}
        response = api.get("/v1/nodes", params=paged, headers=LATEST)
        assert response.status_code == 200, response.text
        page = [n["uuid"] for n in response.json()["nodes"]]
        seen += page
        if "next" not in response.json():
            break
        marker = page[-1]
    assert seen == [n["uuid"] for n in everything]
    assert sorted(seen) == sorted(created)
