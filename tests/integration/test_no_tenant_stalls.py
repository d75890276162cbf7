"""One tenant's hostile peers cannot stall the service for anybody else, on real sockets.

The tenant (project ``p-lessee``) leases 40 Redfish nodes whose BMCs accept
connections and never answer, and 45 fake-hardware nodes; it asks for the
virtual media of every Redfish node at once and attaches, to every fake
node, an image from a server that trickles one byte now and then. While all
of that is in flight, the API answers other callers, an agent's lookup is
answered, and another project's node goes from ``enroll`` to ``active``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from metalforge.config import Settings
from tests.support.api import wait_until
from tests.support.auth import ADMIN, LESSEE_MEMBER, OTHER_ADMIN, basic_auth_settings
from tests.support.stack import LiveServer, serving
from tests.support.stalling import StallingServer, stalling

pytestmark = pytest.mark.timeout(300)

SILENT_BMCS = 40
ATTACHES = 45
ANSWER_WITHIN = 10.0
"""Seconds a request of another caller may take before the test calls the API stalled
(before this change such requests waited minutes, until the tenant's peers let go)."""


def _settings(tmp_path: Path) -> Settings:
    base = basic_auth_settings(f"sqlite:///{tmp_path}/mf.sqlite", tmp_path)
    conductor = base.conductor.model_copy(
        update={
            "enabled_hardware_types": ["fake-hardware", "redfish"],
            "workers_per_project": 3,
            "netboot": base.conductor.netboot.model_copy(
                update={
                    "image_cache_dir": tmp_path / "images",
                    "http_url": "http://192.0.2.10:6385",
                    "fetch_allowed_networks": [ipaddress.ip_network("127.0.0.0/8")],
                }
            ),
        }
    )
    return base.model_copy(update={"conductor": conductor})


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with serving(_settings(tmp_path)) as server:
        yield server


def _call(method: str, url: str, headers: dict[str, str], **kwargs: Any) -> requests.Response:
    return requests.request(method, url, headers=headers, timeout=ANSWER_WITHIN, **kwargs)


def _create(live: LiveServer, body: dict[str, Any]) -> str:
    answer = _call("POST", f"{live.url}/v1/nodes", ADMIN.headers, json=body)
    assert answer.status_code == 201, answer.text
    uuid: str = answer.json()["uuid"]
    return uuid


def _move(live: LiveServer, uuid: str, target: str, state: str) -> None:
    url = f"{live.url}/v1/nodes/{uuid}/states/provision"
    answer = _call("PUT", url, OTHER_ADMIN.headers, json={"target": target})
    assert answer.status_code == 202, answer.text

    def reached() -> bool:
        node = _call("GET", f"{live.url}/v1/nodes/{uuid}", OTHER_ADMIN.headers).json()
        assert not node["last_error"], node["last_error"]
        return bool(node["provision_state"] == state)

    wait_until(f"node {uuid} {state}", reached, timeout=60)


def test_a_tenant_s_silent_bmcs_and_trickling_images_stall_nobody_else(live: LiveServer) -> None:
    leased = {"owner": "p-owner", "lessee": "p-lessee"}
    bmcs = [StallingServer("silent") for _ in range(SILENT_BMCS)]
    pool = ThreadPoolExecutor(SILENT_BMCS, thread_name_prefix="tenant")
    try:
        with stalling("trickle", interval=2.0, body_start=b"\0" * 64) as image:
            silent = [
                _create(
                    live,
                    {
                        "driver": "redfish",
                        **leased,
                        "driver_info": {
                            "redfish_address": bmc.url,
                            "redfish_system_id": "/redfish/v1/Systems/1",
                        },
                    },
                )
                for bmc in bmcs
            ]
            fake = [_create(live, {"driver": "fake-hardware", **leased}) for _ in range(ATTACHES)]
            foreign = _create(live, {"driver": "fake-hardware", "owner": "p-other"})

            # The tenant reads every silent node's virtual media at once ...
            reads = [
                pool.submit(
                    requests.get,
                    f"{live.url}/v1/nodes/{uuid}/vmedia",
                    headers=LESSEE_MEMBER.headers,
                    timeout=600,
                )
                for uuid in silent
            ]
            # ... and attaches the trickling image to each of its other nodes.
            for number, uuid in enumerate(fake):
                body = {
                    "device_type": "cdrom",
                    "image_url": f"{image.url}/slow-{number}.iso",
                    "image_download_source": "local",
                }
                url = f"{live.url}/v1/nodes/{uuid}/vmedia"
                attached = _call("POST", url, LESSEE_MEMBER.headers, json=body)
                assert attached.status_code == 204, attached.text
            wait_until("the BMC calls in flight", lambda: sum(b.accepted for b in bmcs) >= 3)
            wait_until("the downloads in flight", lambda: image.accepted >= 3)

            # Beyond its share, the tenant is told at once to come back later.
            share = live.stack.settings.api.outbound_per_caller
            answered, waiting = futures.wait(reads, timeout=ANSWER_WITHIN)
            assert len(waiting) == share, "the tenant's share of the outbound pool is taken"
            refused = [r.result() for r in answered]
            assert all(r.status_code == 503 for r in refused), [r.text for r in refused]
            assert all(r.headers["Retry-After"] for r in refused)

            # Everybody else is served as if nothing happened.
            listed = _call("GET", f"{live.url}/v1/nodes", ADMIN.headers)
            assert listed.status_code == 200
            assert len(listed.json()["nodes"]) == SILENT_BMCS + ATTACHES + 1
            lookup = _call(
                "GET",
                f"{live.url}/v1/lookup?addresses=52:54:00:00:00:01",
                {"X-OpenStack-Ironic-API-Version": "latest"},
            )
            assert lookup.status_code == 404, lookup.text
            _move(live, foreign, "manage", "manageable")
            _move(live, foreign, "provide", "available")
            _move(live, foreign, "active", "active")
            assert image.accepted < ATTACHES, "the tenant's attaches wait for its share"
    finally:
        for bmc in bmcs:
            bmc.close()
        pool.shutdown(wait=True, cancel_futures=True)
