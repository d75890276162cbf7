"""A BMC that stops answering: its breaker opens, the cluster sees it, other BMCs move.

Two Redfish nodes on one stack: one behind a closed port (a BMC that is
down), one on the emulator. The dead BMC trips its breaker on its first
failed call (``failures_to_open`` 1 here); ``GET /metrics`` then names it,
its node's next request fails at once with the breaker's reason, and the
live node is verified all the while.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.config import load_settings
from metalforge_lab.ports import free_port
from tests.support.api import LATEST, create_node, provision, wait_for_state, wait_until
from tests.support.redfish import Bmc, start_bmc, start_redfish_stack
from tests.support.stack import FAST_CONDUCTOR, Stack


@pytest.fixture
def bmc(tmp_path: Path) -> Iterator[Bmc]:
    yield from start_bmc(tmp_path / "bmc", count=1)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    settings = load_settings(
        database={"url": f"sqlite:///{tmp_path}/mf.sqlite"},
        conductor={
            **FAST_CONDUCTOR,
            "hostname": "breaker-conductor",
            "bmc_guard": {"failures_to_open": 1, "cooldown": 600},
        },
    )
    running = start_redfish_stack(settings)
    try:
        yield running
    finally:
        running.stop()


def _error(stack: Stack, node: dict[str, Any]) -> str:
    shown = stack.client.get(f"/v1/nodes/{node['uuid']}", headers=LATEST).json()
    return str(shown["last_error"] or "")


def test_a_dead_bmc_trips_its_breaker_and_the_cluster_sees_it(stack: Stack, bmc: Bmc) -> None:
    client = stack.client
    dead_address = f"http://127.0.0.1:{free_port()}"
    dead = create_node(
        client,
        driver="redfish",
        driver_info={"redfish_address": dead_address, "redfish_system_id": "/redfish/v1/Systems/x"},
    )
    live = create_node(
        client, driver="redfish", driver_info=bmc.driver_info(bmc.emulator.systems[0])
    )
    assert provision(client, dead["uuid"], "manage").status_code == 202
    assert provision(client, live["uuid"], "manage").status_code == 202
    # The verification fails naming the BMC (unreachable, or, if the power read was tried
    # again after the breaker opened, the breaker's refusal).
    wait_until("the dead BMC's verification to fail", lambda: dead_address in _error(stack, dead))
    wait_for_state(client, live["uuid"], "manageable")

    line = (
        f'metalforge_bmc_breaker_open{{address="{dead_address}",holder="breaker-conductor",'
        'protocol="redfish"}'
    )
    wait_until(
        "the open breaker in /metrics",
        lambda: line in client.get("/metrics", headers=LATEST).text,
    )
    # The next request to the dead BMC is refused by the breaker, without a connection.
    assert provision(client, dead["uuid"], "manage").status_code == 202
    refused = wait_until(
        "the breaker's refusal",
        lambda: (
            "is not being called"
            in (client.get(f"/v1/nodes/{dead['uuid']}", headers=LATEST).json()["last_error"] or "")
        ),
    )
    assert refused
    assert (
        'metalforge_bmc_errors_total{kind="circuit_open",protocol="redfish"}'
        in client.get("/metrics", headers=LATEST).text
    )
