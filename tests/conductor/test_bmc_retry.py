"""A BMC that does not answer is asked again within the budget; one that says no is not.

``driver_info.fake_bmc_unanswered = N`` makes the fake BMC leave its first N
power changes unanswered (``BmcUnavailable``), as a busy or rebooting BMC
would; the test stack's budget is 1 s with a first pause of 0.2 s (then 0.4,
0.8...), so two unanswered changes fit in it and five do not.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
import sushy.exceptions as sushy_errors

from metalforge.drivers.base import BmcUnavailable, DriverError
from metalforge.drivers.ipmi.client import CredentialsRefused, NoAnswer
from metalforge.drivers.redfish.connection import RedfishInfo, parse_driver_info, translate
from tests.support.api import (
    LATEST,
    create_node,
    get_node,
    wait_until,
)
from tests.support.stack import Stack


def _power_on(stack: Stack, **driver_info: Any) -> dict[str, Any]:
    client = stack.client
    node = create_node(client, driver_info=driver_info)
    answer = client.put(
        f"/v1/nodes/{node['uuid']}/states/power", json={"target": "power on"}, headers=LATEST
    )
    assert answer.status_code == 202, answer.text

    def settled() -> dict[str, Any] | None:
        shown = get_node(client, node["uuid"])
        return shown if shown["target_power_state"] is None else None

    done: dict[str, Any] = wait_until("the power change to end", settled)
    return done


def _events(stack: Stack, uuid: str, kind: str) -> list[str]:
    answer = stack.client.get(f"/v1/nodes/{uuid}/history?detail=true", headers=LATEST)
    assert answer.status_code == 200, answer.text
    return [e["event"] for e in answer.json()["history"] if e["event_type"] == kind]


def test_a_bmc_that_answers_again_within_the_budget_is_waited_for(sqlite_stack: Stack) -> None:
    node = _power_on(sqlite_stack, fake_bmc_unanswered=2)
    assert (node["power_state"], node["last_error"]) == ("power on", None)
    retries = _events(sqlite_stack, node["uuid"], "bmc_retry")
    assert len(retries) == 2, retries
    assert "power power on: fake BMC did not answer" in retries[0]
    assert "trying again in 0.2s (attempt 2)" in retries[0]
    assert "trying again in 0.4s (attempt 3)" in retries[1]


def test_a_bmc_silent_past_the_budget_fails_the_change(sqlite_stack: Stack) -> None:
    node = _power_on(sqlite_stack, fake_bmc_unanswered=5)
    assert node["power_state"] != "power on"
    assert "fake BMC did not answer power power on" in node["last_error"]
    # 0.2 + 0.4 of pauses, then the next (0.8) would end past the 1 s budget.
    assert len(_events(sqlite_stack, node["uuid"], "bmc_retry")) == 2


def test_a_bmc_that_says_no_is_not_asked_again(sqlite_stack: Stack) -> None:
    node = _power_on(sqlite_stack, fake_fail_steps="power.set_power_state")
    assert "told to fail power.set_power_state" in node["last_error"]
    assert _events(sqlite_stack, node["uuid"], "bmc_retry") == []


INFO: RedfishInfo = parse_driver_info(
    {
        "redfish_address": "https://bmc.example:8443",
        "redfish_username": "admin",
        "redfish_password": "secret",
    }
)


def _answered(status: int) -> requests.Response:
    """An HTTP answer from the BMC with a Redfish error body."""
    response = requests.Response()
    response.status_code = status
    response._content = b'{"error": {"code": "Base.1.0.GeneralError", "message": "no"}}'
    return response


URL = "https://bmc.example:8443/redfish/v1/Systems/1"


@pytest.mark.parametrize(
    ("raised", "temporary"),
    [
        (sushy_errors.ConnectionError(url=URL, error="timed out"), True),
        (sushy_errors.ServerSideError("POST", URL, _answered(503)), True),
        (sushy_errors.ServerSideError("POST", URL, _answered(500)), False),
        (sushy_errors.AccessError("POST", URL, _answered(401)), False),
    ],
    ids=["no-answer", "busy", "broken", "refused-credentials"],
)
def test_redfish_failures_say_whether_asking_again_can_help(
    raised: Exception, temporary: bool
) -> None:
    translated = translate(INFO, raised, "power on")
    assert isinstance(translated, DriverError)
    assert isinstance(translated, BmcUnavailable) is temporary


def test_ipmi_no_answer_is_temporary_and_refused_credentials_are_not() -> None:
    assert issubclass(NoAnswer, BmcUnavailable)
    assert not issubclass(CredentialsRefused, BmcUnavailable)
