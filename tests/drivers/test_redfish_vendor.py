"""``redfish`` vendor methods (event subscriptions) through the API, against sushy-emulator.

sushy-tools' emulator (2.2.0, the lab's) serves no ``EventService``: its
service root does not list one and it has no subscription routes. So what
is tested against it is what it can show honestly: the methods are listed,
arguments are refused before the BMC is contacted, and a call that reaches
the BMC fails with a message saying the BMC has no EventService (and an
unreachable BMC with one saying so), with the node left unheld. Creating,
reading and deleting a subscription on a BMC that has one is not tested here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.config import load_settings
from metalforge_lab.ports import free_port
from tests.support.api import LATEST, create_node, error_text, get_node
from tests.support.redfish import Bmc, start_bmc, start_redfish_stack
from tests.support.stack import FAST_CONDUCTOR, Stack

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    yield from start_bmc(tmp_path_factory.mktemp("vendor-bmc"), count=2)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    settings = load_settings(
        database={"url": f"sqlite:///{tmp_path}/mf.sqlite"},
        conductor={**FAST_CONDUCTOR, "hostname": "test-conductor"},
        api={"lock_wait_seconds": 0.2},
    )
    running = start_redfish_stack(settings)
    try:
        yield running
    finally:
        running.stop()


def _node(stack: Stack, info: dict[str, Any]) -> str:
    node: str = create_node(stack.client, driver="redfish", driver_info=info)["uuid"]
    return node


def _call(stack: Stack, node: str, verb: str, method: str, body: Any = None) -> Any:
    return stack.client.request(
        verb, f"/v1/nodes/{node}/vendor_passthru?method={method}", json=body, headers=LATEST
    )


def test_redfish_nodes_list_the_subscription_methods(stack: Stack, bmc: Bmc) -> None:
    node = _node(stack, bmc.driver_info(bmc.emulator.systems[0]))
    assert get_node(stack.client, node)["vendor_interface"] == "redfish"
    listed = stack.client.get(f"/v1/nodes/{node}/vendor_passthru/methods", headers=LATEST).json()
    verbs = {name: (m["http_methods"], m["async"]) for name, m in listed.items()}
    assert verbs == {
        "create_subscription": (["POST"], False),
        "delete_subscription": (["DELETE"], False),
        "get_all_subscriptions": (["GET"], False),
        "get_subscription": (["GET"], False),
    }


def test_the_emulator_has_no_event_service(stack: Stack, bmc: Bmc) -> None:
    assert "EventService" not in bmc.get("/redfish/v1/")
    node = _node(stack, bmc.driver_info(bmc.emulator.systems[0]))
    expected = f"Redfish BMC at {bmc.address} has no EventService, needed to "
    created = _call(
        stack, node, "POST", "create_subscription", {"Destination": "https://events.example/in"}
    )
    assert created.status_code == 400
    assert error_text(created) == expected + "create an event subscription"
    listed = _call(stack, node, "GET", "get_all_subscriptions")
    assert (listed.status_code, error_text(listed)) == (400, expected + "list event subscriptions")
    deleted = _call(stack, node, "DELETE", "delete_subscription", {"id": "1"})
    assert error_text(deleted) == expected + "delete event subscription 1"
    assert get_node(stack.client, node)["reservation"] is None


@pytest.mark.parametrize(
    ("verb", "method", "body", "message"),
    [
        (
            "POST",
            "create_subscription",
            {},
            "Parameter 'Destination' not passed to method 'create_subscription'.",
        ),
        (
            "POST",
            "create_subscription",
            {"Destination": "ftp://x"},
            "Destination 'ftp://x' is not a valid http(s) URL",
        ),
        (
            "POST",
            "create_subscription",
            {"Destination": "https://x", "EventTypes": "Alert"},
            "Parameter 'EventTypes' of method 'create_subscription' must be a list, not a string.",
        ),
        (
            "POST",
            "create_subscription",
            {"Destination": "https://x", "Sneaky": 1},
            "Unexpected argument(s) 'Sneaky' for method 'create_subscription'; it accepts "
            "Context, Destination, EventTypes, HttpHeaders, Protocol.",
        ),
        (
            "DELETE",
            "delete_subscription",
            {"id": "../../Systems/1"},
            "id '../../Systems/1' is not a subscription id (letters, digits, '.', '_', '-')",
        ),
        (
            "DELETE",
            "delete_subscription",
            {},
            "Parameter 'id' not passed to method 'delete_subscription'.",
        ),
        (
            "GET",
            "get_all_subscriptions",
            {"id": "1"},
            "Unexpected argument(s) 'id' for method 'get_all_subscriptions'; it accepts none.",
        ),
        (
            "GET",
            "create_subscription",
            {},
            "The method create_subscription does not support HTTP GET",
        ),
    ],
)
def test_arguments_are_refused_before_the_bmc_is_asked(
    stack: Stack, verb: str, method: str, body: Any, message: str
) -> None:
    # A BMC address nobody listens on: a refusal that reached the BMC would say so.
    node = _node(stack, {"redfish_address": f"http://127.0.0.1:{free_port()}"})
    answer = _call(stack, node, verb, method, body)
    assert answer.status_code == 400, answer.text
    assert error_text(answer) == message


def test_an_unreachable_bmc_is_named(stack: Stack) -> None:
    address = f"http://127.0.0.1:{free_port()}"
    node = _node(stack, {"redfish_address": address})
    answer = _call(stack, node, "GET", "get_all_subscriptions")
    assert answer.status_code == 400
    assert error_text(answer).startswith(f"Redfish BMC at {address} is unreachable")
    assert get_node(stack.client, node)["reservation"] is None


@pytest.fixture(scope="module")
def events_bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    """A BMC with an EventService (the lab's ``redfish_events``)."""
    yield from start_bmc(tmp_path_factory.mktemp("events-bmc"), count=1, event_service=True)


def test_metal3s_event_subscription_is_created_listed_and_deleted(
    stack: Stack, events_bmc: Bmc
) -> None:
    """As Metal3's BMCEventSubscription controller asks: create with Destination, Context
    and HttpHeaders (one object per header), read the ``Id``, delete with a JSON body."""
    node = _node(stack, events_bmc.driver_info(events_bmc.emulator.systems[0]))
    body = {
        "Destination": "https://events.example/in",
        "Context": "metal3-ns/host-1",
        "HttpHeaders": [{"Authorization": "Bearer hook-s3cret"}],
    }
    created = _call(stack, node, "POST", "create_subscription", body)
    assert created.status_code == 200, created.text
    subscription = created.json()
    assert subscription["Destination"] == "https://events.example/in"
    assert subscription["Context"] == "metal3-ns/host-1"
    assert "hook-s3cret" not in created.text
    ident = subscription["Id"]
    kept = events_bmc.get(f"/lab/subscriptions/{ident}/headers")["HttpHeaders"]
    assert kept == [{"Authorization": "Bearer hook-s3cret"}], "the BMC got the headers"
    listed = _call(stack, node, "GET", "get_all_subscriptions").json()
    assert [m["@odata.id"].rsplit("/", 1)[1] for m in listed["Members"]] == [ident]
    shown = _call(stack, node, "GET", "get_subscription", {"id": ident})
    assert shown.json()["Id"] == ident
    wrong = _call(stack, node, "POST", "create_subscription", {**body, "EventTypes": ["Bogus"]})
    assert wrong.status_code == 400
    assert "EventTypes Bogus are not offered by the BMC; it offers Alert" in error_text(wrong)
    deleted = _call(stack, node, "DELETE", "delete_subscription", {"id": ident})
    assert deleted.status_code in (200, 204), deleted.text
    assert _call(stack, node, "GET", "get_all_subscriptions").json()["Members"] == []
