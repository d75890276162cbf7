"""The conventions every Ironic client relies on, independent of any one resource.

Version discovery (``GET /``, ``GET /v1``), microversion negotiation and the
headers ironicclient negotiates from, links, pagination, ``fields`` and
``detail``, the query-string spellings clients send, and the status codes
and bodies of create, delete and asynchronous actions.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send

from metalforge.api.routes import root
from metalforge.api.versions import MAX_VERSION, MIN_VERSION, VersionMiddleware, fmt
from metalforge.config import load_settings
from tests.support.api import LATEST, create_node, error_text, version
from tests.support.stack import Stack, start_stack

BASE = "http://testserver"
MAX = fmt(MAX_VERSION)
MIN_HEADER = "X-OpenStack-Ironic-API-Minimum-Version"
MAX_HEADER = "X-OpenStack-Ironic-API-Maximum-Version"
VERSION_HEADER = "X-OpenStack-Ironic-API-Version"
LIST_KEYS = {"uuid", "name", "instance_uuid", "power_state", "provision_state", "maintenance"}


def _links(collection: str, ident: str) -> list[dict[str, str]]:
    return [
        {"href": f"{BASE}/v1/{collection}/{ident}", "rel": "self"},
        {"href": f"{BASE}/{collection}/{ident}", "rel": "bookmark"},
    ]


def _next_path(url: str) -> str:
    """What ironicclient does with ``next``: keep path and query, drop scheme and host."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


# -- version discovery ----------------------------------------------------------


def _check_version_object(version_object: dict[str, Any]) -> None:
    assert version_object == {
        "id": "v1",
        "links": [{"href": f"{BASE}/v1/", "rel": "self"}],
        "status": "CURRENT",
        "min_version": "1.1",
        "version": MAX,
    }


def test_root_describes_the_one_version(sqlite_stack: Stack) -> None:
    response = sqlite_stack.client.get("/")
    assert response.status_code == 200
    body = response.json()
    assert isinstance(body["name"], str)
    assert isinstance(body["description"], str)
    _check_version_object(body["default_version"])
    assert body["versions"] == [body["default_version"]]
    assert response.headers[MAX_HEADER] == body["default_version"]["version"]


@pytest.mark.parametrize("path", ["/v1", "/v1/"])
def test_v1_nests_the_version_object_and_lists_collections(sqlite_stack: Stack, path: str) -> None:
    client = sqlite_stack.client
    body = client.get(path).json()
    assert body["id"] == "v1"
    assert body["links"][0] == {"href": f"{BASE}/v1/", "rel": "self"}
    assert body["links"][1]["rel"] == "describedby"
    assert body["links"][1]["type"] == "text/html"
    assert body["media_types"] == {
        "base": "application/json",
        "type": "application/vnd.openstack.ironic.v1+json",
    }
    _check_version_object(body["version"])
    for collection in ("nodes", "ports", "drivers"):
        assert body[collection] == [
            {"href": f"{BASE}/v1/{collection}/", "rel": "self"},
            {"href": f"{BASE}/{collection}/", "rel": "bookmark"},
        ]
    # Collections newer than the request's version are not offered.
    assert "conductors" not in body
    newest = client.get(path, headers=LATEST).json()
    for collection in ("conductors", "allocations", "deploy_templates", "runbooks"):
        assert collection not in body
        assert newest[collection][0] == {"href": f"{BASE}/v1/{collection}/", "rel": "self"}
    assert "allocations" not in client.get(path, headers=version("1.51")).json()
    assert "allocations" in client.get(path, headers=version("1.52")).json()


def test_the_default_settings_drive_every_shipped_hardware_type(sqlite_url: str) -> None:
    """``make run`` runs on the defaults: a Redfish or IPMI BMC can be enrolled right away."""
    stack = start_stack(load_settings(database={"url": sqlite_url}))
    try:
        for driver in ("fake-hardware", "ipmi", "redfish"):
            response = stack.client.post("/v1/nodes", json={"driver": driver}, headers=LATEST)
            assert response.status_code == 201, response.text
    finally:
        stack.stop()


@pytest.mark.parametrize("path", ["/", "/v1", "/v1/"])
@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_discovery_is_get_only(sqlite_stack: Stack, path: str, method: str) -> None:
    response = sqlite_stack.client.request(method, path, json={})
    assert response.status_code == 405
    inner = json.loads(response.json()["error_message"])
    assert inner["code"] == 405
    assert response.headers[MIN_HEADER] == "1.1"


@pytest.mark.parametrize("path", ["/", "/v1", "/v1/"])
def test_discovery_answers_head(sqlite_stack: Stack, path: str) -> None:
    response = sqlite_stack.client.head(path)
    assert response.status_code == 200
    assert response.content == b""
    assert response.headers[MAX_HEADER] == MAX


# -- version headers --------------------------------------------------------------


def test_every_response_carries_the_version_headers(sqlite_stack: Stack) -> None:
    """Success, every kind of error, no header: ironicclient negotiates from these."""
    client = sqlite_stack.client
    node = create_node(client, name="headers")
    uuid = node["uuid"]
    responses = {
        "root": client.get("/"),
        "v1": client.get("/v1"),
        "list": client.get("/v1/nodes", headers=LATEST),
        "create": client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST),
        "async": client.put(f"/v1/nodes/{uuid}/maintenance", json={}, headers=LATEST),
        "delete": client.delete(f"/v1/nodes/{uuid}/traits", headers=LATEST),
        "bad request": client.get("/v1/nodes?bogus=1", headers=LATEST),
        "not found": client.get("/v1/nodes/missing", headers=LATEST),
        "no route": client.get("/v1/nowhere"),
        "wrong method": client.delete("/v1/nodes"),
        "conflict": client.post(
            "/v1/nodes", json={"driver": "fake-hardware", "name": "headers"}, headers=LATEST
        ),
        "newer field": client.get("/v1/nodes?fields=owner", headers=version("1.49")),
        "too large": client.post(
            "/v1/nodes",
            content=b" " * (sqlite_stack.settings.api.max_request_body_size + 1),
            headers={**LATEST, "content-type": "application/json"},
        ),
        "NUL": client.get("/v1/nodes/%00"),
    }
    statuses = {name: r.status_code for name, r in responses.items()}
    assert statuses == {
        "root": 200,
        "v1": 200,
        "list": 200,
        "create": 201,
        "async": 202,
        "delete": 204,
        "bad request": 400,
        "not found": 404,
        "no route": 404,
        "wrong method": 405,
        "conflict": 409,
        "newer field": 406,
        "too large": 413,
        "NUL": 400,
    }
    for name, response in responses.items():
        assert response.headers.get(MIN_HEADER) == "1.1", name
        assert response.headers.get(MAX_HEADER) == MAX, name
        assert response.headers.get(VERSION_HEADER), name
        assert response.headers["x-openstack-request-id"].startswith("req-"), name
        assert (
            response.headers["openstack-request-id"] == (response.headers["x-openstack-request-id"])
        ), name
    assert responses["root"].headers[VERSION_HEADER] == "1.1"
    assert responses["list"].headers[VERSION_HEADER] == MAX
    assert responses["newer field"].headers[VERSION_HEADER] == "1.49"


def test_unsupported_version_is_406_with_the_range(sqlite_stack: Stack) -> None:
    response = sqlite_stack.client.get("/v1/nodes", headers=version("1.999"))
    assert response.status_code == 406
    assert response.headers[MIN_HEADER] == "1.1"
    assert response.headers[MAX_HEADER] == MAX
    assert VERSION_HEADER not in response.headers
    assert "1.999" in error_text(response)


def test_unparsable_version_is_406_without_the_range(sqlite_stack: Stack) -> None:
    response = sqlite_stack.client.get("/v1/nodes", headers=version("one.five"))
    assert response.status_code == 406
    assert MIN_HEADER not in response.headers
    assert MAX_HEADER not in response.headers
    assert isinstance(response.json()["error_message"], str)


def test_unexpected_server_error_keeps_the_headers_and_the_format() -> None:
    """A 500 is answered inside the version middleware, so it carries the headers too.

    The failing application is a real ASGI app that raises; the exception is
    still re-raised for the server to log.
    """

    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    client = TestClient(VersionMiddleware(broken), raise_server_exceptions=False)
    response = client.get("/v1/nodes", headers=LATEST)
    assert response.status_code == 500
    assert response.headers[MIN_HEADER] == "1.1"
    assert response.headers[VERSION_HEADER] == MAX
    inner = json.loads(response.json()["error_message"])
    assert inner == {
        "faultcode": "Server",
        "faultstring": "Internal error: RuntimeError",
        "debuginfo": None,
    }
    with pytest.raises(RuntimeError):
        TestClient(VersionMiddleware(broken)).get("/")


def test_standard_header_wins_over_the_legacy_one(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    create_node(client, name="both-headers")
    both = {"OpenStack-API-Version": "baremetal 1.4", VERSION_HEADER: "1.5"}
    response = client.get("/v1/nodes/both-headers", headers=both)
    assert response.status_code == 404  # names need 1.5: 1.4 was used
    assert response.headers[VERSION_HEADER] == "1.4"
    both = {"OpenStack-API-Version": "baremetal 1.5", VERSION_HEADER: "1.4"}
    response = client.get("/v1/nodes/both-headers", headers=both)
    assert response.status_code == 200
    assert response.headers[VERSION_HEADER] == "1.5"
    # A standard header for another service is not ours: the legacy one applies.
    other = {"OpenStack-API-Version": "compute 2.90", VERSION_HEADER: "1.31"}
    assert client.get("/v1/nodes", headers=other).headers[VERSION_HEADER] == "1.31"


@pytest.mark.parametrize(
    "headers",
    [
        {VERSION_HEADER: "latest"},
        {VERSION_HEADER: "LATEST"},
        {"OpenStack-API-Version": "baremetal latest"},
    ],
)
def test_latest_is_the_maximum(sqlite_stack: Stack, headers: dict[str, str]) -> None:
    client = sqlite_stack.client
    node = create_node(client)
    response = client.get(f"/v1/nodes/{node['uuid']}", headers=headers)
    assert response.headers[VERSION_HEADER] == MAX
    assert "health" in response.json()  # the newest node field


def test_no_header_means_version_1_1(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, name="old-client", resource_class="gold")
    uuid = node["uuid"]
    assert client.get("/v1/nodes/old-client").status_code == 404  # names need 1.5
    shown = client.get(f"/v1/nodes/{uuid}")
    assert shown.headers[VERSION_HEADER] == "1.1"
    body = shown.json()
    for newer in ("name", "resource_class", "traits", "driver_internal_info", "owner", "states"):
        assert newer not in body, newer
    assert {"uuid", "driver", "provision_state", "extra", "ports", "links"} <= set(body)
    listed = client.get("/v1/nodes").json()["nodes"]
    assert {tuple(sorted(item)) for item in listed} == {
        tuple(sorted((LIST_KEYS - {"name"}) | {"links"}))
    }
    assert client.get("/v1/nodes?fields=uuid").status_code == 406  # fields need 1.8
    created = client.post("/v1/nodes", json={"driver": "fake-hardware"})
    assert created.status_code == 201
    # Before 1.11 nodes are born "available", which before 1.2 reads as null.
    assert created.json()["provision_state"] is None
    assert "name" not in created.json()


# -- links --------------------------------------------------------------------------


def test_objects_carry_self_and_bookmark_links(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    created = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST)
    uuid = created.json()["uuid"]
    assert created.json()["links"] == _links("nodes", uuid)
    shown = client.get(f"/v1/nodes/{uuid}", headers=LATEST).json()
    assert shown["links"] == _links("nodes", uuid)
    for sub in ("ports", "states", "portgroups", "volume"):
        assert shown[sub] == [
            {"href": f"{BASE}/v1/nodes/{uuid}/{sub}", "rel": "self"},
            {"href": f"{BASE}/nodes/{uuid}/{sub}", "rel": "bookmark"},
        ]
    listed = client.get("/v1/nodes", headers=LATEST).json()["nodes"]
    assert [n["links"] for n in listed if n["uuid"] == uuid] == [_links("nodes", uuid)]
    port = client.post(
        "/v1/ports", json={"address": "52:54:00:aa:00:01", "node_uuid": uuid}, headers=LATEST
    ).json()
    assert port["links"] == _links("ports", port["uuid"])
    # The links are absolute, built from the host the client used.
    other_host = client.get(f"/v1/nodes/{uuid}", headers={**LATEST, "host": "bm.example:6385"})
    assert other_host.json()["links"][0]["href"] == f"http://bm.example:6385/v1/nodes/{uuid}"


# -- pagination ---------------------------------------------------------------------


def test_next_pages_through_a_filtered_list(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    wanted = {create_node(client, resource_class="paged")["uuid"] for _ in range(5)}
    create_node(client, resource_class="other")
    url = "/v1/nodes?resource_class=paged&fields=uuid,resource_class&limit=2"
    seen: list[str] = []
    pages = 0
    while url:
        body = client.get(url, headers=LATEST).json()
        pages += 1
        assert len(body["nodes"]) <= 2
        assert all(set(n) == {"uuid", "resource_class", "links"} for n in body["nodes"])
        seen += [n["uuid"] for n in body["nodes"]]
        url = _next_path(body["next"]) if "next" in body else ""
        if url:
            next_url = body["next"]
            assert next_url.startswith(f"{BASE}/v1/nodes?")
            query = parse_qs(urlsplit(next_url).query)
            assert query["limit"] == ["2"]
            assert query["marker"] == [seen[-1]]
            assert query["resource_class"] == ["paged"]
            assert query["fields"] == ["uuid,resource_class"]
    assert pages == 3
    assert sorted(seen) == sorted(wanted)
    assert len(seen) == len(set(seen))


def test_next_keeps_sorting_and_the_detail_path(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    for i in range(3):
        create_node(client, name=f"sorted-{i}")
    first = client.get(
        "/v1/nodes/detail?sort_key=name&sort_dir=desc&limit=2", headers=LATEST
    ).json()
    assert [n["name"] for n in first["nodes"]] == ["sorted-2", "sorted-1"]
    assert first["next"].startswith(f"{BASE}/v1/nodes/detail?")
    query = parse_qs(urlsplit(first["next"]).query)
    assert query["sort_key"] == ["name"]
    assert query["sort_dir"] == ["desc"]
    second = client.get(_next_path(first["next"]), headers=LATEST).json()
    assert [n["name"] for n in second["nodes"]] == ["sorted-0"]
    assert "next" not in second
    # A page that is not full has no next; neither has an unlimited list.
    assert "next" not in client.get("/v1/nodes", headers=LATEST).json()


def test_ports_paginate_too(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)
    for i in range(3):
        address = f"52:54:00:bb:00:0{i}"
        client.post(
            "/v1/ports", json={"address": address, "node_uuid": node["uuid"]}, headers=LATEST
        )
    first = client.get(f"/v1/ports?node={node['uuid']}&limit=2", headers=LATEST).json()
    assert len(first["ports"]) == 2
    assert parse_qs(urlsplit(first["next"]).query)["node"] == [node["uuid"]]
    second = client.get(_next_path(first["next"]), headers=LATEST).json()
    assert len(second["ports"]) == 1
    assert "next" not in second


# -- fields and detail --------------------------------------------------------------


def test_fields_returns_only_those_plus_links(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, name="fielded")
    listed = client.get("/v1/nodes?fields=uuid,provision_state", headers=LATEST).json()
    assert all(set(n) == {"uuid", "provision_state", "links"} for n in listed["nodes"])
    shown = client.get(f"/v1/nodes/{node['uuid']}?fields=name,traits", headers=LATEST).json()
    assert shown == {"name": "fielded", "traits": [], "links": _links("nodes", node["uuid"])}
    port_fields = client.get("/v1/ports?fields=address", headers=LATEST)
    assert port_fields.status_code == 200


def test_default_list_shows_six_fields_and_detail_shows_all(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    create_node(client)
    default = client.get("/v1/nodes", headers=LATEST).json()["nodes"]
    assert {frozenset(n) for n in default} == {frozenset(LIST_KEYS | {"links"})}
    detailed = client.get("/v1/nodes?detail=True", headers=LATEST).json()["nodes"]
    detail_path = client.get("/v1/nodes/detail", headers=LATEST).json()["nodes"]
    assert detailed == detail_path
    assert {"driver", "properties", "traits", "conductor_group"} <= set(detailed[0])
    not_detailed = client.get("/v1/nodes?detail=false", headers=LATEST).json()["nodes"]
    assert not_detailed == default


def test_detail_rules(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    assert client.get("/v1/nodes?detail=True", headers=version("1.43")).status_code == 200
    assert client.get("/v1/nodes?detail=True", headers=version("1.42")).status_code == 406
    both = client.get("/v1/nodes?detail=True&fields=uuid", headers=LATEST)
    assert both.status_code == 400
    assert "fields" in error_text(both)
    detail_fields = client.get("/v1/nodes/detail?fields=uuid", headers=LATEST)
    assert detail_fields.status_code == 400
    assert error_text(detail_fields) == "Unexpected arguments: fields"


@pytest.mark.parametrize("collection", ["nodes", "ports"])
def test_trailing_slash_before_the_query(sqlite_stack: Stack, collection: str) -> None:
    """ironicclient sends ``GET /v1/nodes/?fields=...``."""
    client = sqlite_stack.client
    node = create_node(client)
    client.post(
        "/v1/ports",
        json={"address": "52:54:00:cc:00:01", "node_uuid": node["uuid"]},
        headers=LATEST,
    )
    with_slash = client.get(f"/v1/{collection}/?fields=uuid", headers=LATEST)
    without = client.get(f"/v1/{collection}?fields=uuid", headers=LATEST)
    assert with_slash.status_code == 200
    assert with_slash.json() == without.json()
    assert len(with_slash.json()[collection]) == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("True", True),
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        ("on", True),
        ("t", True),
        ("Y", True),
        ("False", False),
        ("false", False),
        ("0", False),
        ("no", False),
        ("off", False),
        ("f", False),
        ("N", False),
    ],
)
def test_boolean_spellings(sqlite_stack: Stack, value: str, expected: bool) -> None:
    client = sqlite_stack.client
    resting = create_node(client)["uuid"]
    fixing = create_node(client)["uuid"]
    assert client.put(f"/v1/nodes/{fixing}/maintenance", headers=LATEST).status_code == 202
    listed = client.get(f"/v1/nodes?maintenance={value}", headers=LATEST).json()["nodes"]
    assert [n["uuid"] for n in listed] == [fixing if expected else resting]


def test_unprefixed_paths_are_the_same_api(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, name="no-prefix")
    assert (
        client.get("/nodes", headers=LATEST).json()
        == client.get("/v1/nodes", headers=LATEST).json()
    )
    shown = client.get("/nodes/no-prefix", headers=LATEST)
    assert shown.status_code == 200
    assert shown.json()["links"] == _links("nodes", node["uuid"])
    assert client.get("/nodes/no-prefix/states", headers=LATEST).status_code == 200
    assert client.get("/ports", headers=LATEST).status_code == 200
    assert client.get("/nodes?bogus=1", headers=LATEST).status_code == 400


# -- status codes and bodies of writes ----------------------------------------------


def test_create_is_201_with_location(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST)
    assert node.status_code == 201
    uuid = node.json()["uuid"]
    assert node.headers["Location"] == f"{BASE}/v1/nodes/{uuid}"
    assert node.json()["provision_state"] == "enroll"
    assert node.json()["power_state"] is None
    port = client.post(
        "/v1/ports", json={"address": "52:54:00:DD:00:01", "node_uuid": uuid}, headers=LATEST
    )
    assert port.status_code == 201
    assert port.headers["Location"] == f"{BASE}/v1/ports/{port.json()['uuid']}"
    assert port.json()["address"] == "52:54:00:dd:00:01"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("states/provision", {"target": "manage"}),
        ("states/power", {"target": "power on"}),
    ],
)
def test_async_actions_are_202_with_no_body_and_a_location(
    sqlite_stack: Stack, path: str, body: dict[str, Any]
) -> None:
    client = sqlite_stack.client
    uuid = create_node(client)["uuid"]
    response = client.put(f"/v1/nodes/{uuid}/{path}", json=body, headers=LATEST)
    assert response.status_code == 202
    assert response.content == b""
    assert "content-type" not in response.headers
    assert response.headers["Location"] == f"{BASE}/v1/nodes/{uuid}/states"


def test_maintenance_is_202_with_no_body(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    uuid = create_node(client)["uuid"]
    on = client.put(f"/v1/nodes/{uuid}/maintenance", json={"reason": "disk"}, headers=LATEST)
    assert (on.status_code, on.content) == (202, b"")
    shown = client.get(f"/v1/nodes/{uuid}", headers=LATEST).json()
    assert (shown["maintenance"], shown["maintenance_reason"]) == (True, "disk")
    off = client.delete(f"/v1/nodes/{uuid}/maintenance", headers=LATEST)
    assert (off.status_code, off.content) == (202, b"")


def test_deletes_and_trait_writes_are_204_with_no_body(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    uuid = create_node(client)["uuid"]
    port = client.post(
        "/v1/ports", json={"address": "52:54:00:ee:00:01", "node_uuid": uuid}, headers=LATEST
    ).json()
    responses = [
        client.put(f"/v1/nodes/{uuid}/traits", json={"traits": ["CUSTOM_A"]}, headers=LATEST),
        client.put(f"/v1/nodes/{uuid}/traits/CUSTOM_B", headers=LATEST),
        client.delete(f"/v1/nodes/{uuid}/traits/CUSTOM_A", headers=LATEST),
        client.delete(f"/v1/nodes/{uuid}/traits", headers=LATEST),
        client.delete(f"/v1/ports/{port['uuid']}", headers=LATEST),
        client.delete(f"/v1/nodes/{uuid}", headers=LATEST),
    ]
    assert [(r.status_code, r.content) for r in responses] == [(204, b"")] * len(responses)
    assert client.get(f"/v1/nodes/{uuid}", headers=LATEST).status_code == 404


def test_v1_offers_every_collection_served_from_the_version_it_answers_at(
    sqlite_stack: Stack,
) -> None:
    """The offered collections come from the routers; each answers from the version
    ``/v1`` offers it at (a newer one missing from ``root.INTRODUCED`` fails here), and
    not before it; the versions are Ironic's."""
    client = sqlite_stack.client
    newest = client.get("/v1", headers=LATEST).json()
    offered = {name for name, value in newest.items() if isinstance(value, list)} - {"links"}
    ironic = {"chassis", "nodes", "ports", "drivers", "portgroups", "volume", "lookup"}
    ironic |= {"heartbeat", "conductors", "allocations", "events", "deploy_templates"}
    ironic |= {"shards", "runbooks", "inspection_rules", "continue_inspection"}
    assert offered == ironic | {"rollouts", "firmware_baselines"}
    # Served by POST only, or (events) an endless stream here: their own tests read them.
    for name in sorted(offered - {"events", "heartbeat", "continue_inspection"}):
        since = root.INTRODUCED.get(name, MIN_VERSION)
        answer = client.get(f"/v1/{name}", headers=version(fmt(since)))
        assert answer.status_code not in (404, 405, 406), (name, answer.text)
        assert name in client.get("/v1", headers=version(fmt(since))).json()
        if since > MIN_VERSION:
            before = version(fmt((since[0], since[1] - 1)))
            assert client.get(f"/v1/{name}", headers=before).status_code in (404, 406), name
            assert name not in client.get("/v1", headers=before).json()
