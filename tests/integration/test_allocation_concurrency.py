"""Many simultaneous allocations on three conductor processes, one of them SIGKILLed.

400 allocations race for 200 nodes through one API and three conductors on
PostgreSQL. Whatever the interleaving, exactly 200 must end ``active`` on
200 different nodes and the other 200 in ``error``, none left
``allocating`` -- also when a conductor dies half-way with allocations,
node reservations and work items in hand.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from metalforge_lab.http_errors import HttpError
from metalforge_lab.postgres import PostgresCluster
from tests.support.processes import ProcessGroup, ServiceProcess, http

CONDUCTORS = ["alloc-a", "alloc-b", "alloc-c"]
NODES = 200
ALLOCATIONS = 400


def _config(path: Path, url: str) -> Path:
    path.write_text(
        f"""\
log_level = "WARNING"

[database]
url = "{url}"
pool_size = 10

[conductor]
workers = 8
heartbeat_interval = 0.5
heartbeat_timeout = 3.0
lease_seconds = 120.0
takeover_interval = 1.0
allocation_takeover_interval = 1.0
affinity_grace = 0.5
poll_interval = 0.2
automated_clean = false
"""
    )
    return path


@pytest.fixture
def pg_url(postgres: PostgresCluster) -> str:
    name = f"mf_alloc_{uuidlib.uuid4().hex[:12]}"
    postgres.execute(f"CREATE DATABASE {name}")
    return postgres.url(name)


def _retry(method: str, url: str, body: Any = None, expect: tuple[int, ...] = (200,)) -> Any:
    deadline = time.monotonic() + 30
    while True:
        try:
            return http(method, url, body, expect=expect, timeout=30)
        except HttpError as exc:
            if exc.status != 409 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _all_nodes(api: str) -> list[dict[str, Any]]:
    fields = "uuid,provision_state,instance_uuid,allocation_uuid,reservation"
    nodes: list[dict[str, Any]] = http("GET", f"{api}/v1/nodes?fields={fields}&limit=1000")["nodes"]
    return nodes


def _wait_nodes(api: str, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = _all_nodes(api)
        if len(nodes) == NODES and all(n["provision_state"] == state for n in nodes):
            return
        time.sleep(0.3)
    raise AssertionError(f"nodes did not all reach {state}")


def _enroll(api: str, pool: ThreadPoolExecutor) -> None:
    body = {"driver": "fake-hardware", "resource_class": "race", "automated_clean": False}
    uuids = list(
        pool.map(
            lambda i: http("POST", f"{api}/v1/nodes", body, expect=(201,))["uuid"], range(NODES)
        )
    )
    list(
        pool.map(
            lambda u: _retry(
                "PUT", f"{api}/v1/nodes/{u}/states/provision", {"target": "manage"}, (202,)
            ),
            uuids,
        )
    )
    _wait_nodes(api, "manageable", 60)
    list(
        pool.map(
            lambda u: _retry(
                "PUT", f"{api}/v1/nodes/{u}/states/provision", {"target": "provide"}, (202,)
            ),
            uuids,
        )
    )
    _wait_nodes(api, "available", 60)


def _final(api: str, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        found = http("GET", f"{api}/v1/allocations?limit=1000")["allocations"]
        if len(found) == ALLOCATIONS and all(a["state"] != "allocating" for a in found):
            return found
        time.sleep(0.5)
    states = [a["state"] for a in found]
    raise AssertionError(f"allocations not finished: {states.count('allocating')} allocating")


def _check(api: str, found: list[dict[str, Any]]) -> None:
    active = [a for a in found if a["state"] == "active"]
    errors = [a for a in found if a["state"] == "error"]
    assert len(active) == NODES
    assert len(errors) == ALLOCATIONS - NODES
    assert len({a["node_uuid"] for a in active}) == NODES
    assert all(
        "no available nodes match the resource class race" in a["last_error"] for a in errors
    )
    by_node = {a["node_uuid"]: a["uuid"] for a in active}
    for node in _all_nodes(api):
        assert node["instance_uuid"] == node["allocation_uuid"] == by_node[node["uuid"]]
        assert node["reservation"] is None or node["reservation"] in CONDUCTORS


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("kill", [False, True], ids=["all-alive", "one-killed"])
def test_400_allocations_for_200_nodes(pg_url: str, tmp_path: Path, kill: bool) -> None:
    config = _config(tmp_path / "metalforge.toml", pg_url)
    with ProcessGroup(tmp_path, config) as group, ThreadPoolExecutor(32) as pool:
        group.run("db", "upgrade")
        conductors: dict[str, ServiceProcess] = {h: group.start_conductor(h) for h in CONDUCTORS}
        api_process = group.start_api("api")
        api_process.wait_http()
        assert api_process.url is not None
        api = api_process.url
        group.wait_for_conductors(api, CONDUCTORS)
        _enroll(api, pool)

        body: dict[str, Any] = {
            "resource_class": "race",
            "name": None,
            "traits": [],
            "candidate_nodes": None,
        }

        def allocate(_: int) -> str:
            return str(
                http("POST", f"{api}/v1/allocations", body, expect=(201,), timeout=30)["uuid"]
            )

        half = list(pool.map(allocate, range(ALLOCATIONS // 2)))
        if kill:
            conductors["alloc-a"].kill()
        rest = list(pool.map(allocate, range(ALLOCATIONS - len(half))))
        assert len(set(half + rest)) == ALLOCATIONS
        _check(api, _final(api, 60))
