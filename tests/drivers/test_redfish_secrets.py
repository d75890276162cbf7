"""A whole run with a real Redfish BMC that wants a password: the password shows nowhere.

Every response body the API sent, every log record of every logger (at
DEBUG), and the node's history are collected over a run that enrolls,
verifies, inspects, powers, sets the boot device, fails on a wrong password
and is probed with JSON patches; then each is searched for the passwords.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import wait_for_state
from tests.support.auth import ADMIN, OWNER_READER, basic_auth_settings
from tests.support.redfish import PASSWORD, USER, Bmc, start_bmc, start_redfish_stack
from tests.support.stack import Stack

WRONG = "wrong-pass-zq7"


@pytest.fixture
def auth_bmc(tmp_path: Path) -> Iterator[Bmc]:
    yield from start_bmc(tmp_path / "bmc", count=2, users={USER: PASSWORD})


@pytest.fixture
def stack(sqlite_url: str, tmp_path: Path) -> Iterator[Stack]:
    running = start_redfish_stack(basic_auth_settings(sqlite_url, tmp_path))
    try:
        yield running
    finally:
        running.stop()


class Recorder:
    """Sends requests as a persona and keeps every response body."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.bodies: list[str] = []

    def __call__(self, method: str, url: str, who: Any = ADMIN, **kw: Any) -> Any:
        response = self.stack.client.request(method, url, headers=who.headers, **kw)
        self.bodies.append(f"{method} {url} -> {response.status_code} {response.text}")
        return response


def _wait_idle(call: Recorder, uuid: str) -> dict[str, Any]:
    node: dict[str, Any] = wait_for_state(call.stack.client, uuid, "manageable")
    return node


def test_no_response_log_or_history_shows_a_bmc_password(
    stack: Stack, auth_bmc: Bmc, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    call = Recorder(stack)
    stack.client.headers.update(ADMIN.headers)  # wait_for_state polls as the admin
    good, bad = auth_bmc.take(), auth_bmc.take()

    created = call(
        "POST",
        "/v1/nodes",
        json={
            "driver": "redfish",
            "owner": "p-owner",
            "driver_info": auth_bmc.driver_info(good),
        },
    )
    assert created.status_code == 201, created.text
    uuid = created.json()["uuid"]
    assert (
        call("PUT", f"/v1/nodes/{uuid}/states/provision", json={"target": "manage"}).status_code
        == 202
    )
    _wait_idle(call, uuid)
    assert (
        call("PUT", f"/v1/nodes/{uuid}/states/provision", json={"target": "inspect"}).status_code
        == 202
    )
    inspected = _wait_idle(call, uuid)
    assert inspected["properties"].get("cpus"), inspected
    for target in ("power on", "power off"):
        assert (
            call("PUT", f"/v1/nodes/{uuid}/states/power", json={"target": target}).status_code
            == 202
        )
        wait_for_state(stack.client, uuid, target, field="power_state")
    assert (
        call(
            "PUT", f"/v1/nodes/{uuid}/management/boot_device", json={"boot_device": "pxe"}
        ).status_code
        == 204
    )
    call("GET", f"/v1/nodes/{uuid}/management/boot_device")
    for ops in (
        [{"op": "test", "path": "/driver_info/redfish_password", "value": "x"}],
        [{"op": "copy", "from": "/driver_info/redfish_password", "path": "/extra/pw"}],
        [{"op": "remove", "path": "/driver_info/redfish_password/x"}],
        [{"op": "replace", "path": "/driver_info/redfish_address", "value": "http://192.0.2.9"}],
    ):
        assert call("PATCH", f"/v1/nodes/{uuid}", json=ops).status_code in (400, 403)

    # A node whose stored password the BMC refuses: the failure is reported, not the password.
    wrong_info = {**auth_bmc.driver_info(bad), "redfish_password": WRONG}
    refused = call("POST", "/v1/nodes", json={"driver": "redfish", "driver_info": wrong_info})
    wrong = refused.json()["uuid"]
    call("PUT", f"/v1/nodes/{wrong}/states/provision", json={"target": "manage"})
    failed = wait_for_state(stack.client, wrong, "enroll")
    assert "refused the credentials" in (failed["last_error"] or "")

    for node in (uuid, wrong):
        call("GET", f"/v1/nodes/{node}")
        call("GET", f"/v1/nodes/{node}/history?detail=true")
        call("GET", f"/v1/nodes/{node}/validate")
        call("GET", f"/v1/nodes/{node}", who=OWNER_READER)
    call("GET", "/v1/nodes/detail")
    call("GET", "/v1/nodes/detail?fields=driver_info,last_error,driver_internal_info")

    logs = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    everything = "\n".join(call.bodies) + "\n" + logs
    assert len(call.bodies) > 20
    assert caplog.records
    assert PASSWORD not in everything
    assert WRONG not in everything
    assert "******" in everything  # the passwords were there to be masked
