"""``POST /v1/continue_inspection``: the ramdisk's report, as ironic-python-agent posts it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from metalforge import inspection_states as ins
from metalforge.api.inspector.app import create_inspector_app
from metalforge.db import introspections
from metalforge.db.models import InspectionData
from tests.support.api import (
    LATEST,
    create_node,
    error_text,
    get_node,
    provision,
    version,
    wait_for_state,
    wait_until,
)
from tests.support.stack import Stack, start_stack, test_settings

MAC = "52:54:00:12:34:56"


def _waiting(stack: Stack, macs: tuple[str, ...] = (MAC,), **fields: Any) -> dict[str, Any]:
    """A node with PXE ports ``macs`` in ``inspect wait``, whose simulated ramdisk will not
    report for an hour."""
    driver_info = {"fake_step_delay": 3600, **fields.pop("driver_info", {})}
    node = create_node(stack.client, driver_info=driver_info, **fields)
    for mac in macs:
        port = stack.client.post(
            "/v1/ports", json={"address": mac, "node_uuid": node["uuid"]}, headers=LATEST
        )
        assert port.status_code == 201, port.text
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    assert provision(stack.client, node["uuid"], "inspect").status_code == 202
    return wait_for_state(stack.client, node["uuid"], "inspect wait")


def _report(mac: str = MAC, **inventory: Any) -> dict[str, Any]:
    return {
        "inventory": {
            "interfaces": [{"name": "eth0", "mac_address": mac, "ipv4_address": "192.0.2.5"}],
            "cpu": {"count": 4, "architecture": "aarch64"},
            "memory": {"physical_mb": 8192},
            "disks": [{"name": "/dev/vda", "size": 21 * 1024**3}],
            "boot": {"pxe_interface": mac},
            **inventory,
        },
        "root_disk": {"name": "/dev/vda", "size": 21 * 1024**3},
        "logs": "H4sIAAAAAAAAAwMAAAAAAAAAAAA=",
        "error": None,
    }


def test_the_agents_report_finishes_the_inspection(stack: Stack) -> None:
    node = _waiting(stack)
    response = stack.client.post("/v1/continue_inspection", json=_report())
    assert response.status_code == 202, response.text
    assert response.json() == {"uuid": node["uuid"]}
    done = wait_for_state(stack.client, node["uuid"], "manageable")
    props = done["properties"]
    assert (props["cpus"], props["cpu_arch"], props["memory_mb"], props["local_gb"]) == (
        4,
        "aarch64",
        8192,
        20,
    )
    with stack.db.read() as session:
        data = introspections.load_data(session, node["uuid"])
    assert data is not None
    assert data.raw is not None
    assert "logs" not in data.raw  # the logs are not kept with the report
    inventory = stack.client.get(f"/v1/nodes/{node['uuid']}/inventory", headers=LATEST).json()
    assert inventory["inventory"]["cpu"]["architecture"] == "aarch64"
    assert "logs" not in inventory["plugin_data"]


def test_a_second_report_after_processing_began_is_404(stack: Stack) -> None:
    node = _waiting(stack)
    assert stack.client.post("/v1/continue_inspection", json=_report()).status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    again = stack.client.post("/v1/continue_inspection", json=_report())
    assert again.status_code == 404


def test_unknown_macs_are_404_and_change_nothing(stack: Stack) -> None:
    node = _waiting(stack)
    response = stack.client.post("/v1/continue_inspection", json=_report("52:54:00:ff:ff:ff"))
    assert response.status_code == 404
    assert "could not be found" in error_text(response)
    with stack.db.read() as session:
        record = introspections.load(session, node["uuid"])
    assert record is not None
    assert record.state == ins.WAITING


def test_a_node_is_found_by_its_bmc_address(stack: Stack) -> None:
    node = _waiting(stack, (), driver_info={"redfish_address": "192.0.2.77"})
    report = _report("52:54:00:aa:aa:aa", bmc_address="192.0.2.77")
    response = stack.client.post("/v1/continue_inspection", json=report)
    assert response.status_code == 202, response.text
    assert response.json()["uuid"] == node["uuid"]


def _two_nics(first: str, second: str) -> dict[str, Any]:
    report = _report(first)
    report["inventory"]["interfaces"].append({"name": "eth1", "mac_address": second})
    return report


def test_a_report_must_name_every_mac_the_node_boots_from(stack: Stack) -> None:
    other = "52:54:00:12:34:57"
    node = _waiting(stack, (MAC, other), driver_info={"redfish_address": "192.0.2.78"})
    refused = [
        ("/v1/continue_inspection", _report(MAC)),  # one MAC of two
        ("/v1/continue_inspection", _report("52:54:00:aa:aa:ab", bmc_address="192.0.2.78")),
        (f"/v1/continue_inspection?node_uuid={node['uuid']}", _report("52:54:00:aa:aa:ac")),
    ]
    for path, report in refused:
        response = stack.client.post(path, json=report, headers=version("1.84"))
        assert response.status_code == 404, (path, response.text)
    waiting = get_node(stack.client, node["uuid"])
    assert waiting["provision_state"] == "inspect wait"
    # The node says why (the caller learns nothing of it): the last refusal, once each.
    assert waiting["last_error"].startswith("An inspection report was refused: it names")
    assert other in waiting["last_error"]
    history = stack.client.get(
        f"/v1/nodes/{node['uuid']}/history?detail=true", headers=LATEST
    ).json()["history"]
    refusals = [e for e in history if e["event"].startswith("An inspection report was refused")]
    assert len(refusals) == 3
    again = stack.client.post(*refused[0][:1], json=refused[0][1], headers=version("1.84"))
    assert again.status_code == 404
    history = stack.client.get(
        f"/v1/nodes/{node['uuid']}/history?detail=true", headers=LATEST
    ).json()["history"]
    assert len([e for e in history if e["event"].startswith("An inspection")]) == 4
    with stack.db.read() as session:
        data = introspections.load_data(session, node["uuid"])
    stored = json.dumps(data.raw if data is not None else None)
    assert "aa:aa" not in stored  # no refused report was kept
    response = stack.client.post("/v1/continue_inspection", json=_two_nics(other, MAC))
    assert response.status_code == 202, response.text
    assert response.json()["uuid"] == node["uuid"]


def test_from_184_the_node_may_be_named_and_the_answer_is_a_lookup(stack: Stack) -> None:
    node = _waiting(stack)
    response = stack.client.post(
        f"/v1/continue_inspection?node_uuid={node['uuid']}",
        json=_report(),
        headers=version("1.84"),
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["node"]["uuid"] == node["uuid"]
    assert body["config"]["agent_token_required"] is True


def test_versions_between_11_and_184_are_refused(stack: Stack) -> None:
    response = stack.client.post("/v1/continue_inspection", json=_report(), headers=version("1.50"))
    assert response.status_code == 404
    assert "1.84" in error_text(response)


def test_malformed_reports_are_400(stack: Stack) -> None:
    malformed: tuple[Any, ...] = (
        [],
        {"inventory": {}},
        {"inventory": {"interfaces": [{"name": "x"}]}},
    )
    for body in malformed:
        response = stack.client.post("/v1/continue_inspection", json=body)
        assert response.status_code == 400, (body, response.text)
        assert "Invalid inspection data" in error_text(response)
    nothing = stack.client.post(
        "/v1/continue_inspection",
        json={"inventory": {"interfaces": [{"name": "eth0", "mac_address": "bogus"}]}},
    )
    assert nothing.status_code == 400
    assert "No lookup information" in error_text(nothing)


def test_a_report_before_the_node_waits_is_409_so_the_agent_retries(stack: Stack) -> None:
    node = create_node(stack.client)
    port = stack.client.post(
        "/v1/ports", json={"address": MAC, "node_uuid": node["uuid"]}, headers=LATEST
    )
    assert port.status_code == 201
    with stack.db.write() as session:
        introspections.save(session, introspections.Record(node["uuid"], ins.STARTING, 1))
    response = stack.client.post("/v1/continue_inspection", json=_report())
    assert response.status_code == 409
    assert "still starting" in error_text(response)
    with stack.db.read() as session:
        data = introspections.load_data(session, node["uuid"])
    assert data is None  # nothing was stored


def test_discovery_enrolls_a_machine_no_node_matches(db_url: str) -> None:
    settings = test_settings(db_url)
    settings.conductor.inspection.discovery = True
    settings.conductor.inspection.discovery_driver = "fake-hardware"
    stack = start_stack(settings)
    try:
        new_mac = "52:54:00:de:5c:01"
        response = stack.client.post(
            "/v1/continue_inspection", json=_report(new_mac, bmc_address="192.0.2.9")
        )
        assert response.status_code == 202, response.text
        uuid = response.json()["uuid"]
        node = wait_for_state(stack.client, uuid, "enroll")
        wait_until(
            "the report to be processed",
            lambda: get_node(stack.client, uuid)["properties"].get("cpus") == 4,
        )
        with stack.db.read() as session:
            record = introspections.load(session, uuid)
        assert record is not None
        assert record.state == ins.FINISHED
        assert node["driver"] == "fake-hardware"
        ports = stack.client.get(f"/v1/ports?node={uuid}", headers=LATEST).json()["ports"]
        assert [p["address"] for p in ports] == [new_mac]
        inventory = stack.client.get(f"/v1/nodes/{uuid}/inventory", headers=LATEST).json()
        assert inventory["plugin_data"]["auto_discovered"] is True
        # The same machine again: its MAC is known now, so no second node.
        again = stack.client.post("/v1/continue_inspection", json=_report(new_mac))
        assert again.status_code == 404
        listed = stack.client.get("/v1/nodes", headers=LATEST).json()["nodes"]
        assert len(listed) == 1
    finally:
        stack.stop()


def test_a_discovery_rule_gives_an_enrolled_machine_its_driver(db_url: str) -> None:
    """Ironic's sample: a rule on ``{node.auto_discovered}`` sets the driver and its BMC
    address from the report; the node takes the driver's default interfaces."""
    settings = test_settings(db_url, enabled_hardware_types=["fake-hardware", "ipmi"])
    settings.conductor.inspection.discovery = True
    settings.conductor.inspection.discovery_driver = "fake-hardware"
    stack = start_stack(settings)
    try:
        rule = {
            "conditions": [{"op": "is-true", "args": {"value": "{node.auto_discovered}"}}],
            "actions": [
                {"op": "set-attribute", "args": {"path": "/driver", "value": "ipmi"}},
                {
                    "op": "set-attribute",
                    "args": {
                        "path": "/driver_info/ipmi_address",
                        "value": "{inventory[bmc_address]}",
                    },
                },
            ],
        }
        created = stack.client.post("/v1/inspection_rules", json=rule, headers=LATEST)
        assert created.status_code == 201, created.text
        response = stack.client.post(
            "/v1/continue_inspection", json=_report("52:54:00:de:5c:03", bmc_address="192.0.2.9")
        )
        assert response.status_code == 202, response.text
        uuid = response.json()["uuid"]
        wait_until(
            "the rule to set the driver", lambda: get_node(stack.client, uuid)["driver"] == "ipmi"
        )
        node = get_node(stack.client, uuid)
        assert node["driver_info"]["ipmi_address"] == "192.0.2.9"
        assert (node["power_interface"], node["management_interface"]) == ("ipmitool", "ipmitool")
        assert node["last_error"] is None
    finally:
        stack.stop()


def test_without_discovery_an_unknown_machine_is_404(stack: Stack) -> None:
    response = stack.client.post("/v1/continue_inspection", json=_report("52:54:00:de:5c:02"))
    assert response.status_code == 404
    assert stack.client.get("/v1/nodes", headers=LATEST).json()["nodes"] == []


def test_a_huge_reported_error_is_stored_bounded(stack: Stack) -> None:
    """The report is unauthenticated: its ``error`` (here 2 MB) reaches last_error, the
    history and the introspection record cut to a stated bound, each once."""
    node = _waiting(stack)
    report = {**_report(), "error": "disk on fire " * 160_000}
    response = stack.client.post("/v1/continue_inspection", json=report)
    assert response.status_code == 202, response.text
    failed = wait_for_state(stack.client, node["uuid"], "inspect failed")
    assert "the ramdisk reported an error: disk on fire" in failed["last_error"]
    assert len(failed["last_error"]) < 5000
    assert "more characters)" in failed["last_error"]
    history = stack.client.get(
        f"/v1/nodes/{node['uuid']}/history?detail=true", headers=LATEST
    ).json()["history"]
    assert all(len(event["event"]) < 5000 for event in history)
    with stack.db.read() as session:
        record = introspections.load(session, node["uuid"])
    assert record is not None
    assert record.error is not None
    assert len(record.error) < 5000


def test_discovery_enrolls_at_most_its_limit_a_minute(sqlite_url: str) -> None:
    settings = test_settings(sqlite_url)
    settings.conductor.inspection.discovery = True
    settings.conductor.inspection.discovery_max_per_minute = 2
    stack = start_stack(settings)
    try:
        answers = [
            stack.client.post("/v1/continue_inspection", json=_report(f"52:54:00:de:6c:0{i}"))
            for i in range(3)
        ]
        assert [a.status_code for a in answers] == [202, 202, 503]
        assert answers[2].headers["Retry-After"] == "60"
        assert "limit" in json.loads(answers[2].json()["error_message"])["faultstring"]
        # The inspector's own port says when to come back too.
        inspector = TestClient(create_inspector_app(stack.app.state.services))
        again = inspector.post("/v1/continue", json=_report("52:54:00:de:6c:09"))
        assert again.status_code == 503, again.text
        assert again.headers["Retry-After"] == "60"
        assert len(stack.client.get("/v1/nodes", headers=LATEST).json()["nodes"]) == 2
    finally:
        stack.stop()


def _stored(stack: Stack, uuid: str) -> InspectionData:
    with stack.db.read() as session:
        row = session.get(InspectionData, uuid)
        assert row is not None
        session.expunge(row)
    return row


def test_a_processed_report_is_stored_once_and_read_back_whole(stack: Stack) -> None:
    node = _waiting(stack)
    report = _report()
    report["extra_collector"] = {"lldp": [1, 2]}
    assert stack.client.post("/v1/continue_inspection", json=report).status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    row = _stored(stack, node["uuid"])
    assert row.raw is None  # folded into the processed data: not a second copy
    assert row.raw_received_at is not None
    with stack.db.read() as session:
        data = introspections.load_data(session, node["uuid"])
    assert data is not None
    sent = {k: v for k, v in report.items() if k != "logs"}
    assert data.raw == sent  # the report as received, rebuilt
    assert data.plugin_data is not None
    assert data.plugin_data["extra_collector"] == {"lldp": [1, 2]}
    assert "all_interfaces" in data.plugin_data


def test_a_report_using_a_derived_key_is_kept_as_it_came(stack: Stack) -> None:
    node = _waiting(stack)
    report = _report()
    report["macs"] = ["the ramdisk's own"]
    assert stack.client.post("/v1/continue_inspection", json=report).status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    row = _stored(stack, node["uuid"])
    assert row.raw is not None
    assert row.raw["macs"] == ["the ramdisk's own"]


def test_a_report_that_cannot_be_stored_is_400_and_changes_nothing(stack: Stack) -> None:
    """PostgreSQL takes no NUL in JSONB, and nothing reads NaN or a 70-bit integer back."""
    node = _waiting(stack)
    for poison in ("a\u0000b", float("nan"), 2**70):
        report = _report()
        report["extra_collector"] = {"value": poison}
        raw = json.dumps(report, allow_nan=True)
        response = stack.client.post(
            "/v1/continue_inspection", content=raw, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, (poison, response.text)
        assert "Invalid inspection data" in error_text(response)
    assert get_node(stack.client, node["uuid"])["provision_state"] == "inspect wait"
    good = stack.client.post("/v1/continue_inspection", json=_report())
    assert good.status_code == 202, good.text


def test_the_inspector_api_returns_the_data_as_ironic_inspector_stores_it(stack: Stack) -> None:
    """ironic-inspector's processing adds the scheduling keys, the interfaces and the BMC
    addresses beside the inventory, read from the inventory (``0.0.0.0`` is no address)."""
    node = _waiting(stack)
    report = _report(bmc_address="0.0.0.0", bmc_v6address="fd00::5")
    report["inventory"]["cpu"]["count"] = "4"  # as some ramdisks send it
    assert stack.client.post("/v1/continue_inspection", json=report).status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    # An operator's later edit of a property does not change what the data says.
    edit = [{"op": "replace", "path": "/properties/memory_mb", "value": 1}]
    assert stack.client.patch(f"/v1/nodes/{node['uuid']}", json=edit).status_code == 200
    inspector = TestClient(create_inspector_app(stack.app.state.services))
    data = inspector.get(f"/v1/introspection/{node['uuid']}/data").json()
    eth0 = {"ip": "192.0.2.5", "mac": MAC, "client_id": None, "pxe": True}
    assert {k: data[k] for k in ("cpus", "cpu_arch", "memory_mb", "local_gb")} == {
        "cpus": 4,
        "cpu_arch": "aarch64",
        "memory_mb": 8192,
        "local_gb": 20,
    }
    assert (data["ipmi_address"], data["ipmi_v6address"]) == (None, "fd00::5")
    assert data["macs"] == [MAC]
    assert data["boot_interface"] == MAC
    assert data["root_disk"]["name"] == "/dev/vda"
    assert data["interfaces"] == data["all_interfaces"] == {"eth0": eth0}
    assert data["inventory"]["cpu"]["count"] == "4"  # the inventory as it came
    # ironic-inspector's keys and no others (Ironic's plugin data says valid_interfaces).
    assert sorted(data) == sorted(
        [
            *("inventory", "root_disk", "error", "boot_interface", "macs", "local_gb"),
            *("all_interfaces", "interfaces", "ipmi_address", "ipmi_v6address"),
            *("cpus", "cpu_arch", "memory_mb"),
        ]
    )
    # Ironic's face keeps Ironic's plugin data: local_gb, none of the inspector's own keys.
    plugin = stack.client.get(f"/v1/nodes/{node['uuid']}/inventory", headers=LATEST).json()
    assert plugin["plugin_data"]["local_gb"] == 20
    assert "cpus" not in plugin["plugin_data"]
    assert "interfaces" not in plugin["plugin_data"]


def test_a_report_is_decoded_off_the_event_loop(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 16 MiB report decoded on the event loop would stall every other request for as
    long: the body is decoded in a worker thread."""
    on_loop: list[bool] = []
    decode = json.loads

    def watched(raw: Any, *args: Any, **kwargs: Any) -> Any:
        if not (isinstance(raw, bytes) and b'"root_disk"' in raw):
            return decode(raw, *args, **kwargs)  # not the report: json is everybody's
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return decode(raw)

    monkeypatch.setattr(json, "loads", watched)  # the module schemas decodes with
    node = _waiting(stack)
    response = stack.client.post("/v1/continue_inspection", json=_report())
    assert response.status_code == 202, response.text
    assert on_loop == [False]
    wait_for_state(stack.client, node["uuid"], "manageable")
