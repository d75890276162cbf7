"""Concurrent PATCHes of one node lose no update, on both engines, through a real server."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.support.api import LATEST, create_node
from tests.support.stack import LiveServer, start_stack, test_settings

WRITERS = 20


@pytest.fixture
def server(db_url: str) -> Iterator[LiveServer]:
    stack = start_stack(test_settings(db_url), start_conductor=False)
    live = LiveServer(stack)
    live.start()
    try:
        yield live
    finally:
        live.stop()
        stack.stop()


@pytest.mark.slow
def test_twenty_concurrent_patches_of_different_keys_all_land(server: LiveServer) -> None:
    node = create_node(server.stack.client, name="contended")

    def patch(n: int) -> int:
        response = requests.patch(
            f"{server.url}/v1/nodes/contended",
            json=[{"op": "add", "path": f"/extra/key{n}", "value": n}],
            headers=LATEST,
            timeout=60,
        )
        return response.status_code

    with ThreadPoolExecutor(WRITERS) as pool:
        codes = list(pool.map(patch, range(WRITERS)))
    assert codes == [200] * WRITERS
    extra = server.stack.client.get(f"/v1/nodes/{node['uuid']}", headers=LATEST).json()["extra"]
    assert extra == {f"key{n}": n for n in range(WRITERS)}
