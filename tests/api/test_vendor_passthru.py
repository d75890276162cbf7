"""Vendor passthru through the API: Ironic's listing, answers and refusals, on fake-hardware.

Driver-level methods: no shipped vendor interface declares one (neither does
Ironic's), so a hardware type made for these tests adds one beside fake's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from metalforge.db.models import Node
from metalforge.drivers.base import DriverError, DriverTask, check_vendor_args
from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.fake import FAKE_HARDWARE, FakeVendor
from metalforge.drivers.hardware import DriverRegistry, HardwareType
from metalforge.drivers.raid import LOGICAL_DISK_KEYS, LOGICAL_DISK_PROPERTIES
from metalforge.drivers.vendor import driver_passthru, passthru
from metalforge.services.vendor import MAX_ARGS_BYTES
from tests.support.api import LATEST, create_node, error_text, version, wait_until
from tests.support.stack import Stack, start_stack, test_settings


def _call(client: TestClient, node: str, method: str, verb: str = "POST", body: Any = None) -> Any:
    return client.request(
        verb, f"/v1/nodes/{node}/vendor_passthru?method={method}", json=body, headers=LATEST
    )


def _history(client: TestClient, node: str) -> list[str]:
    answer = client.get(f"/v1/nodes/{node}/history", headers=LATEST)
    return [entry["event"] for entry in answer.json()["history"]]


def test_methods_list_ironics_fake_vendor_methods(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    answer = client.get(f"/v1/nodes/{node}/vendor_passthru/methods", headers=LATEST)
    assert answer.status_code == 200
    methods = answer.json()
    assert set(methods) == {
        "first_method",
        "second_method",
        "third_method_sync",
        "fourth_method_shared_lock",
        "log_passthrough",
    }
    assert methods["third_method_sync"] == {
        "http_methods": ["POST"],
        "async": False,
        "description": "Answers whether bar is 'meow'.",
        "attach": False,
        "require_exclusive_lock": True,
    }
    assert methods["second_method"]["async"] is True
    assert methods["fourth_method_shared_lock"]["require_exclusive_lock"] is False
    # The oldest microversion serves it too (Ironic: 1.1).
    old = client.get(f"/v1/nodes/{node}/vendor_passthru/methods", headers=version("1.1"))
    assert old.status_code == 200


def test_no_vendor_offers_nothing(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client, vendor_interface="no-vendor")["uuid"]
    listed = client.get(f"/v1/nodes/{node}/vendor_passthru/methods", headers=LATEST)
    assert (listed.status_code, listed.json()) == (200, {})
    answer = _call(client, node, "third_method_sync", body={"bar": "meow"})
    assert answer.status_code == 400
    assert error_text(answer) == "No handler for method third_method_sync"


def test_sync_method_answers_its_return_value_under_the_nodes_reservation(
    sqlite_stack: Stack,
) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    yes = _call(client, node, "third_method_sync", body={"bar": "meow"})
    assert (yes.status_code, yes.json()) == (200, True)
    no = _call(client, node, "third_method_sync", body={"bar": "woof"})
    assert (no.status_code, no.json()) == (200, False)
    # The call held the node and let it go.
    shown = client.get(f"/v1/nodes/{node}", headers=LATEST).json()
    assert shown["reservation"] is None
    assert _history(client, node).count("vendor method third_method_sync (POST) called") == 2


def test_sync_method_on_a_held_node_is_409(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    with sqlite_stack.db.write() as session:
        session.execute(update(Node).where(Node.uuid == node).values(reservation="test-conductor"))
    answer = _call(client, node, "third_method_sync", body={"bar": "meow"})
    assert answer.status_code == 409
    queued = _call(client, node, "second_method", body={"bar": "kazoo"})
    assert queued.status_code == 409
    # A method that takes no exclusive lock is not refused.
    shared = _call(client, node, "fourth_method_shared_lock", body={"bar": "woof"})
    assert shared.status_code == 202


def test_async_method_is_accepted_and_run_by_the_conductor(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    answer = _call(client, node, "second_method", body={"bar": "kazoo"})
    assert answer.status_code == 202
    assert answer.content == b""
    wait_until(
        "the conductor to run second_method",
        lambda: "vendor method second_method (POST) returned true" in _history(client, node),
    )
    events = _history(client, node)
    assert "vendor method second_method (POST) requested" in events
    shown = client.get(f"/v1/nodes/{node}", headers=LATEST).json()
    assert shown["last_error"] is None
    assert shown["provision_state"] == "enroll"


UNSUPPORTED = "The method %s does not support HTTP"


@pytest.mark.parametrize(
    ("verb", "method", "body", "message"),
    [
        ("POST", "", {}, "Method not specified"),
        ("POST", "none_such", {}, "No handler for method none_such"),
        (
            "PUT",
            "second_method",
            {"bar": "x"},
            "The method second_method does not support HTTP PUT",
        ),
        (
            "GET",
            "third_method_sync",
            None,
            "The method third_method_sync does not support HTTP GET",
        ),
        ("POST", "first_method", {}, "Parameter 'bar' not passed to method 'first_method'."),
        (
            "POST",
            "third_method_sync",
            {"bar": 3},
            "Parameter 'bar' of method 'third_method_sync' must be a string, not an integer.",
        ),
        (
            "POST",
            "second_method",
            {"bar": "x", "baz": 1},
            "Unexpected argument(s) 'baz' for method 'second_method'; it accepts bar.",
        ),
    ],
)
def test_refusals_are_ironics(
    sqlite_stack: Stack, verb: str, method: str, body: Any, message: str
) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    answer = _call(client, node, method, verb, body)
    assert answer.status_code == 400, answer.text
    assert error_text(answer) == message
    assert not any(e.startswith("vendor method") for e in _history(client, node))


def test_hostile_bodies_are_400(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    url = f"/v1/nodes/{node}/vendor_passthru?method=third_method_sync"
    for body in ([1, 2], "meow", 7):
        assert client.post(url, json=body, headers=LATEST).status_code == 400
    big = client.post(url, json={"bar": "x" * MAX_ARGS_BYTES}, headers=LATEST)
    assert big.status_code == 400
    assert "at most" in error_text(big)
    nul = client.post(url, json={"bar": "a\x00b"}, headers=LATEST)
    assert nul.status_code == 400
    deep: Any = "x"
    for _ in range(40):
        deep = {"bar": deep}
    assert client.post(url, json=deep, headers=LATEST).status_code == 400
    junk = client.post(
        url, content=b"{not json", headers={**LATEST, "Content-Type": "application/json"}
    )
    assert junk.status_code == 400
    extra = client.post(url + "&other=1", json={"bar": "meow"}, headers=LATEST)
    assert extra.status_code == 400


def test_unknown_node_is_404(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    missing = "00000000-0000-4000-8000-00000000abcd"
    assert client.get(f"/v1/nodes/{missing}/vendor_passthru/methods").status_code == 404
    assert _call(client, missing, "third_method_sync", body={"bar": "meow"}).status_code == 404


def test_methods_route_takes_only_get(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    node = create_node(client)["uuid"]
    answer = client.post(f"/v1/nodes/{node}/vendor_passthru/methods", headers=LATEST)
    assert answer.status_code == 405


# -- driver-level methods --------------------------------------------------------


class EchoVendor(FakeVendor):
    """fake's vendor methods plus one driver method and one node GET method, for tests."""

    name = "echo"

    def validate_driver_call(self, method: str, http_method: str, args: Mapping[str, Any]) -> None:
        check_vendor_args(method, args, {"text": str}, required=("text",))

    @driver_passthru(["GET", "POST"], asynchronous=False, description="Echo text back.")
    def echo(self, http_method: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if args["text"] == "fail":
            raise DriverError("told to fail")
        return {"verb": http_method, "text": args["text"]}

    @passthru(["GET"], method="node_name", asynchronous=False, exclusive_lock=False)
    def name_of_node(self, task: DriverTask, http_method: str, args: Mapping[str, Any]) -> Any:
        return task.node.name


ECHO_HARDWARE = HardwareType(
    name="echo-hardware",
    supported={**FAKE_HARDWARE.supported, "vendor": (EchoVendor,)},
)


@pytest.fixture
def echo_stack(tmp_path: Path) -> Iterator[Stack]:
    settings = test_settings(
        f"sqlite:///{tmp_path}/mf.sqlite", enabled_hardware_types=["fake-hardware"]
    )
    registry = DriverRegistry([*HARDWARE_TYPES.values(), ECHO_HARDWARE])
    running = start_stack(settings, registry=registry)
    try:
        yield running
    finally:
        running.stop()


def test_driver_methods_and_calls(echo_stack: Stack) -> None:
    client = echo_stack.client
    base = "/v1/drivers/echo-hardware/vendor_passthru"
    listed = client.get(f"{base}/methods", headers=LATEST)
    assert listed.status_code == 200
    assert listed.json() == {
        "echo": {
            "http_methods": ["GET", "POST"],
            "async": False,
            "description": "Echo text back.",
            "attach": False,
        }
    }
    echoed = client.post(f"{base}?method=echo", json={"text": "hi"}, headers=LATEST)
    assert (echoed.status_code, echoed.json()) == (200, {"verb": "POST", "text": "hi"})
    bad_verb = client.delete(f"{base}?method=echo", headers=LATEST)
    assert error_text(bad_verb) == "The method echo does not support HTTP DELETE"
    missing = client.post(f"{base}?method=echo", json={}, headers=LATEST)
    assert error_text(missing) == "Parameter 'text' not passed to method 'echo'."
    failed = client.post(f"{base}?method=echo", json={"text": "fail"}, headers=LATEST)
    assert (failed.status_code, error_text(failed)) == (400, "told to fail")
    # Node methods are not driver methods.
    assert error_text(client.post(f"{base}?method=third_method_sync", headers=LATEST)) == (
        "No handler for method third_method_sync"
    )
    fake = client.get("/v1/drivers/fake-hardware/vendor_passthru/methods", headers=LATEST)
    assert (fake.status_code, fake.json()) == (200, {})
    unknown = client.get("/v1/drivers/none-such/vendor_passthru/methods", headers=LATEST)
    assert unknown.status_code == 404


def test_method_without_exclusive_lock_reads_a_held_node(echo_stack: Stack) -> None:
    client = echo_stack.client
    node = create_node(client, driver="echo-hardware", name="n-echo")["uuid"]
    with echo_stack.db.write() as session:
        session.execute(update(Node).where(Node.uuid == node).values(reservation="someone"))
    answer = _call(client, node, "node_name", "GET")
    assert (answer.status_code, answer.json()) == (200, "n-echo")
    listed = client.get(f"/v1/nodes/{node}/vendor_passthru/methods", headers=LATEST).json()
    assert listed["node_name"]["require_exclusive_lock"] is False


# -- driver properties and RAID ------------------------------------------------------


def test_driver_properties_list_what_the_interfaces_read(sqlite_stack: Stack) -> None:
    answer = sqlite_stack.client.get("/v1/drivers/fake-hardware/properties", headers=LATEST)
    assert answer.status_code == 200
    props = answer.json()
    assert {"fake_step_delay", "fake_fail_steps", "fake_inventory", "A1", "B2"} <= set(props)
    assert all(isinstance(text, str) and text for text in props.values())


def test_logical_disk_properties(sqlite_stack: Stack) -> None:
    client = sqlite_stack.client
    url = "/v1/drivers/fake-hardware/raid/logical_disk_properties"
    answer = client.get(url, headers=version("1.12"))
    assert answer.status_code == 200
    assert answer.json() == LOGICAL_DISK_PROPERTIES
    assert set(LOGICAL_DISK_PROPERTIES) == LOGICAL_DISK_KEYS
    assert client.get(url, headers=version("1.11")).status_code == 406
    unknown = client.get(
        "/v1/drivers/none-such/raid/logical_disk_properties", headers=version("1.12")
    )
    assert unknown.status_code == 404


def test_logical_disk_properties_of_a_driver_without_raid(tmp_path: Path) -> None:
    settings = test_settings(f"sqlite:///{tmp_path}/mf.sqlite", enabled_hardware_types=["ipmi"])
    running = start_stack(settings)
    try:
        answer = running.client.get(
            "/v1/drivers/ipmi/raid/logical_disk_properties", headers=version("1.12")
        )
        assert answer.status_code == 404
        assert error_text(answer) == (
            "Driver ipmi does not support raid (disabled or not implemented)."
        )
    finally:
        running.stop()
