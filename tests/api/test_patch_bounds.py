"""A patch is checked by what it leaves, not only by its operations.

Twenty-five small operations, each adding twenty levels below the last, build
a 500-level document no single request body could carry; the result is
refused (400, nothing changed), and the node moves as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from metalforge.db.models import Node
from tests.support.api import LATEST, error_text
from tests.support.stack import Stack, start_stack, test_settings


def _levels(count: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(count - 1):
        value = {"a": value}
    return value


def _deepening_patch(root: str) -> list[dict[str, Any]]:
    ops = [{"op": "add", "path": f"{root}/a", "value": _levels(20)}]
    path = f"{root}/a" + "/a" * 19
    for _ in range(24):
        ops.append({"op": "add", "path": f"{path}/a", "value": _levels(20)})
        path += "/a" * 20
    return ops


@pytest.mark.parametrize(
    ("collection", "body", "root"),
    [
        ("nodes", {"driver": "fake-hardware"}, "/extra"),
        ("chassis", {}, "/extra"),
    ],
)
def test_a_patch_building_a_deep_document_is_refused(
    sqlite_stack: Stack, collection: str, body: dict[str, Any], root: str
) -> None:
    client = sqlite_stack.client
    created = client.post(f"/v1/{collection}", json=body, headers=LATEST).json()
    url = f"/v1/{collection}/{created['uuid']}"
    refused = client.patch(url, json=_deepening_patch(root), headers=LATEST)
    assert refused.status_code == 400, refused.text
    assert "nested deeper than" in error_text(refused)
    assert client.get(url, headers=LATEST).json()["extra"] == {}


def test_a_patch_leaving_a_document_over_the_size_limit_is_refused(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST).json()
    chunk = "x" * (600 * 1024)
    url = f"/v1/nodes/{node['uuid']}"
    first = client.patch(
        url, json=[{"op": "add", "path": "/extra/a", "value": chunk}], headers=LATEST
    )
    assert first.status_code == 200, first.text
    # Each request is under the body limit; what the second leaves is not.
    refused = client.patch(
        url, json=[{"op": "add", "path": "/extra/b", "value": chunk}], headers=LATEST
    )
    assert refused.status_code == 400, refused.text
    assert "at most" in error_text(refused)
    power = client.put(
        f"/v1/nodes/{node['uuid']}/states/power", json={"target": "power on"}, headers=LATEST
    )
    assert power.status_code == 202, power.text


def test_the_depth_limit_is_the_settings(sqlite_url: str) -> None:
    settings = test_settings(sqlite_url)
    settings.api = settings.api.model_copy(update={"max_json_depth": 10})
    stack = start_stack(settings, start_conductor=False)
    try:
        client = stack.client
        node = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST).json()
        url = f"/v1/nodes/{node['uuid']}"
        fits = client.patch(
            url, json=[{"op": "add", "path": "/extra/a", "value": _levels(8)}], headers=LATEST
        )
        assert fits.status_code == 200, fits.text
        deeper = client.patch(
            url, json=[{"op": "add", "path": "/extra/b", "value": _levels(11)}], headers=LATEST
        )
        assert deeper.status_code == 400, deeper.text
        assert "nested deeper than 10 levels" in error_text(deeper)
    finally:
        stack.stop()


def test_a_provision_request_may_carry_a_config_drive_larger_than_other_bodies(
    sqlite_stack: Stack,
) -> None:
    client = sqlite_stack.client
    node = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST).json()
    drive = "x" * (2 * 1024 * 1024)  # over the operator body limit, as Ironic allows
    response = client.put(
        f"/v1/nodes/{node['uuid']}/states/provision",
        json={"target": "active", "configdrive": drive},
        headers=LATEST,
    )
    assert response.status_code != 413, response.text
    assert response.status_code == 400, response.text  # an enrolled node cannot deploy
    too_big = client.post(
        "/v1/nodes", json={"driver": "fake-hardware", "extra": {"a": drive}}, headers=LATEST
    )
    assert too_big.status_code == 413, too_big.text


def test_a_row_stored_beyond_the_limits_can_be_read_repaired_and_deleted(
    sqlite_stack: Stack,
) -> None:
    """A row written before a limit was lowered (or by an older release) is not a trap."""
    client = sqlite_stack.client
    node = client.post("/v1/nodes", json={"driver": "fake-hardware"}, headers=LATEST).json()
    url = f"/v1/nodes/{node['uuid']}"
    deep = {"deep": _levels(40), "kept": 1}
    with sqlite_stack.db.write() as session:
        session.execute(update(Node).where(Node.uuid == node["uuid"]).values(extra=deep))
    assert client.get(url, headers=LATEST).json()["extra"] == deep
    renamed = client.patch(
        url, json=[{"op": "add", "path": "/name", "value": "repaired"}], headers=LATEST
    )
    assert renamed.status_code == 200, renamed.text  # extra untouched: not re-checked
    deeper = client.patch(
        url, json=[{"op": "add", "path": "/extra/more", "value": 2}], headers=LATEST
    )
    assert deeper.status_code == 400, deeper.text  # extra changed, and still too deep
    fixed = client.patch(url, json=[{"op": "remove", "path": "/extra/deep"}], headers=LATEST)
    assert fixed.status_code == 200, fixed.text
    assert fixed.json()["extra"] == {"kept": 1}
    assert client.delete(url, headers=LATEST).status_code == 204
