"""The real ``baremetal`` CLI (python-ironicclient) against a live metalforge.

Each test drives the unmodified CLI as a subprocess in standalone no-auth
mode, the way operators use it, and checks what it prints: a server that is
only "almost" Ironic shows up here as a crash, a wrong table, a ``--wait``
that gives up, or an error message the CLI cannot render. Calls are grouped
so that the whole module costs about a minute; most of that is the CLI's own
10-second polling in ``--wait`` and its 2-second 409 retries.
"""

from __future__ import annotations

import re

import pytest

from tests.clients.conftest import BaremetalCli


def _field(table: str, name: str) -> str:
    """The value of ``name`` in a ``node show`` style two-column table."""
    match = re.search(rf"^\|\s*{re.escape(name)}\s*\|\s*(.*?)\s*\|$", table, re.MULTILINE)
    assert match, f"no {name} row in:\n{table}"
    return match.group(1)


def test_node_create_list_show_set_unset_and_traits(cli: BaremetalCli) -> None:  # noqa: PLR0915 - one linear CLI session over a node's life
    node = cli.json(
        "node", "create", "--driver", "fake-hardware", "--name", "cli-1",
        "--resource-class", "rc-cli", "--driver-info", "fake_address=10.0.0.1",
        "--driver-info", "fake_password=s3cret",
    )  # fmt: skip
    assert node["name"] == "cli-1"
    assert node["driver"] == "fake-hardware"
    assert node["resource_class"] == "rc-cli"
    assert node["provision_state"] == "enroll"
    assert node["power_state"] is None
    assert node["driver_info"] == {"fake_address": "10.0.0.1", "fake_password": "******"}
    other = cli.run("node", "create", "--driver", "fake-hardware", "--name", "cli-2",
                    "-f", "value", "-c", "uuid").stdout.strip()  # fmt: skip

    table = cli.run("node", "list").stdout
    header = table.splitlines()[1]
    for column in ("uuid", "name", "instance_uuid", "power_state", "provision_state"):
        assert column in header
    assert re.search(rf"\|\s*{node['uuid']}\s*\|\s*cli-1\s*\|.*\|\s*enroll\s*\|", table)
    assert other in table

    long_list = {n["name"]: n for n in cli.json("node", "list", "--long")}
    assert set(long_list) == {"cli-1", "cli-2"}
    assert long_list["cli-1"]["resource_class"] == "rc-cli"
    assert long_list["cli-1"]["driver"] == "fake-hardware"
    assert long_list["cli-2"]["uuid"] == other

    narrow = cli.json("node", "list", "--fields", "uuid", "name")
    assert sorted(narrow, key=lambda n: n["name"]) == [
        {"uuid": node["uuid"], "name": "cli-1"},
        {"uuid": other, "name": "cli-2"},
    ]
    filtered = cli.json(
        "node", "list", "--provision-state", "enroll", "--resource-class", "rc-cli",
        "--no-maintenance", "--unassociated",
    )  # fmt: skip
    assert [n["name"] for n in filtered] == ["cli-1"]
    assert cli.json("node", "list", "--maintenance") == []
    # At 1.1 there are no names and ``available`` did not exist: the CLI shows blanks.
    old = cli.json("--os-baremetal-api-version", "1.1", "node", "list")
    assert {n["uuid"]: n["name"] for n in old} == {node["uuid"]: "", other: ""}

    shown = cli.run("node", "show", "cli-1").stdout
    assert _field(shown, "provision_state") == "enroll"
    assert _field(shown, "uuid") == node["uuid"]

    cli.run(
        "node", "set", "cli-1", "--extra", "rack=r1", "--extra", 'tags=["a", "b"]',
        "--property", "cpus=8", "--property", "memory_mb=4096",
        "--description", "web server", "--instance-info", "image_source=http://img/x.qcow2",
        "--owner", "team-a", "--automated-clean", "--name", "cli-one",
    )  # fmt: skip
    after = cli.json("node", "show", "cli-one")
    assert after["uuid"] == node["uuid"]
    assert after["extra"] == {"rack": "r1", "tags": ["a", "b"]}
    assert after["properties"] == {"cpus": 8, "memory_mb": 4096}
    assert after["description"] == "web server"
    assert after["instance_info"] == {"image_source": "http://img/x.qcow2"}
    assert after["owner"] == "team-a"
    assert after["automated_clean"] is True
    cli.run(
        "node", "unset", "cli-one", "--extra", "tags", "--property", "cpus",
        "--description", "--instance-info", "image_source", "--owner", "--automated-clean",
    )  # fmt: skip
    # A /driver operation that keeps the driver still allows --reset-interfaces.
    cli.run("node", "set", "cli-one", "--name", "cli-1", "--driver", "fake-hardware",
            "--reset-interfaces", "--no-automated-clean")  # fmt: skip
    after = cli.json("node", "show", "cli-1")
    assert after["extra"] == {"rack": "r1"}
    assert after["properties"] == {"memory_mb": 4096}
    assert after["description"] is None
    assert after["instance_info"] == {}
    assert after["owner"] is None
    assert after["automated_clean"] is False
    assert after["deploy_interface"] == "fake"

    added = cli.run("node", "add", "trait", "cli-1", "CUSTOM_GPU", "HW_CPU_X86_AVX2").stdout
    assert "Added trait CUSTOM_GPU" in added
    assert cli.json("node", "trait", "list", "cli-1") == [
        {"traits": "CUSTOM_GPU"},
        {"traits": "HW_CPU_X86_AVX2"},
    ]
    assert "Removed trait CUSTOM_GPU" in cli.run("node", "remove", "trait", "cli-1",
                                                 "CUSTOM_GPU").stdout  # fmt: skip
    missing = cli.error("node", "remove", "trait", "cli-1", "CUSTOM_GPU")
    assert f"Node {node['uuid']} doesn't have a trait 'CUSTOM_GPU' (HTTP 404)" in missing
    assert "(HTTP 400)" in cli.error("node", "add", "trait", "cli-1", "lowercase")
    assert cli.json("node", "show", "cli-1", "--fields", "traits") == {
        "traits": ["HW_CPU_X86_AVX2"]
    }

    assert "Deleted node cli-2" in cli.run("node", "delete", "cli-2").stdout
    assert [n["name"] for n in cli.json("node", "list")] == ["cli-1"]


@pytest.mark.slow
def test_node_lifecycle_with_wait(script_cli: BaremetalCli) -> None:  # noqa: PLR0915 - one linear CLI session, waiting on each step
    cli = script_cli
    cli.run("node", "create", "--driver", "fake-hardware", "--name", "life")
    waited = cli.run("node", "manage", "life", "--wait", "60")
    assert "Waiting for provision state manageable" in waited.output
    cli.run("node", "provide", "life", "--wait", "60")
    node = cli.json("node", "show", "life")
    assert (node["provision_state"], node["target_provision_state"]) == ("available", None)
    assert node["power_state"] == "power off"

    validation = {row["Interface"]: row for row in cli.json("node", "validate", "life")}
    for interface in ("boot", "deploy", "power", "management"):
        assert validation[interface]["Result"] is True, validation[interface]

    cli.run("node", "deploy", "life")
    cli.until_state("life", "active")
    node = cli.json("node", "show", "life")
    assert (node["provision_state"], node["power_state"]) == ("active", "power on")

    # ironicclient sends booleans as the strings "True"/"False" in a node PATCH.
    cli.run("node", "set", "life", "--protected", "--protected-reason", "in production")
    node = cli.json("node", "show", "life", "--fields", "protected", "protected_reason")
    assert node == {"protected": True, "protected_reason": "in production"}
    refused = cli.error("node", "undeploy", "life")
    assert "is protected and cannot be undeployed, rebuilt or deleted (HTTP 403)" in refused
    refused = cli.error("node", "delete", "life")
    assert "is protected and cannot be undeployed, rebuilt or deleted (HTTP 403)" in refused
    assert "Attempt" not in refused  # a 403 is final; a 409 would be retried for ~10 s
    cli.run("node", "unset", "life", "--protected")
    node = cli.json("node", "show", "life", "--fields", "protected", "protected_reason")
    assert node == {"protected": False, "protected_reason": None}

    cli.run("node", "undeploy", "life")
    cli.until_state("life", "available")
    assert cli.json("node", "show", "life")["provision_state"] == "available"

    cli.run("node", "maintenance", "set", "life", "--reason", "fan noise")
    node = cli.json("node", "show", "life", "--fields", "maintenance", "maintenance_reason")
    assert node == {"maintenance": True, "maintenance_reason": "fan noise"}
    assert [n["name"] for n in cli.json("node", "list", "--maintenance")] == ["life"]
    cli.run("node", "maintenance", "unset", "life")
    assert cli.json("node", "list", "--maintenance") == []

    cli.run("node", "power", "on", "life")
    cli.until_power("life", "power on")
    cli.run("node", "power", "off", "life")
    cli.until_power("life", "power off")

    events = [e["event"] for e in cli.json("node", "history", "list", "life")]
    for expected in (
        "enroll -> verifying (manage)",
        "available -> deploying (active)",
        "active -> deleting (deleted)",
        "maintenance on: fan noise",
    ):
        assert expected in events, events
    assert any(e.startswith("power state set to power off") for e in events), events

    cli.run("node", "maintenance", "set", "life")
    assert "Deleted node life" in cli.run("node", "delete", "life").stdout


def test_ports_conductors_and_drivers(cli: BaremetalCli) -> None:
    node = cli.run("node", "create", "--driver", "fake-hardware", "--name", "wired",
                   "-f", "value", "-c", "uuid").stdout.strip()  # fmt: skip
    port = cli.json(
        "port", "create", "--node", node, "52:54:00:AA:BB:CC", "--extra", "slot=a1",
        "--local-link-connection", "switch_id=00:11:22:33:44:55",
        "--local-link-connection", "port_id=Eth1/1", "--physical-network", "physnet1",
    )  # fmt: skip
    assert port["address"] == "52:54:00:aa:bb:cc"
    assert port["node_uuid"] == node
    assert port["pxe_enabled"] is True
    assert port["local_link_connection"] == {"switch_id": "00:11:22:33:44:55", "port_id": "Eth1/1"}

    assert cli.json("port", "list") == [{"uuid": port["uuid"], "address": "52:54:00:aa:bb:cc"}]
    by_node = cli.json("port", "list", "--node", "wired", "--long")
    assert [(p["uuid"], p["physical_network"]) for p in by_node] == [(port["uuid"], "physnet1")]
    assert cli.json("port", "show", port["uuid"])["extra"] == {"slot": "a1"}
    assert cli.json("port", "show", "--address", "52:54:00:aa:bb:cc")["uuid"] == port["uuid"]

    # Booleans arrive as "True"/"False" strings in the port PATCH, as for nodes.
    cli.run("port", "set", port["uuid"], "--pxe-disabled", "--is-smartnic")
    shown = cli.json("port", "show", port["uuid"], "--fields", "pxe_enabled", "is_smartnic")
    assert shown == {"pxe_enabled": False, "is_smartnic": True}
    cli.run("port", "unset", port["uuid"], "--is-smartnic", "--physical-network")
    cli.run("port", "set", port["uuid"], "--pxe-enabled")
    shown = cli.json("port", "show", port["uuid"])
    assert (shown["pxe_enabled"], shown["is_smartnic"], shown["physical_network"]) == (
        True, False, None)  # fmt: skip

    assert f"Deleted port {port['uuid']}" in cli.run("port", "delete", port["uuid"]).stdout
    assert "could not be found. (HTTP 404)" in cli.error("port", "show", port["uuid"])
    assert cli.json("port", "list") == []

    conductors = cli.json("conductor", "list")
    assert conductors == [{"hostname": "test-conductor", "conductor_group": "", "alive": True}]
    drivers = cli.json("driver", "list")
    assert drivers == [{"name": "fake-hardware", "hosts": "test-conductor"}]


def test_error_rendering(cli: BaremetalCli) -> None:
    assert "Node nope could not be found. (HTTP 404)" in cli.error("node", "show", "nope")

    uuid = cli.run("node", "create", "--driver", "fake-hardware", "--name", "err",
                   "-f", "value", "-c", "uuid").stdout.strip()  # fmt: skip
    refused = cli.error("node", "provide", "err")
    assert (
        f'The requested action "provide" can not be performed on node "{uuid}" while it is '
        f'in state "enroll". (HTTP 400)'
    ) in refused
    refused = cli.error("node", "deploy", "err")
    assert 'The requested action "active" can not be performed' in refused

    unknown = cli.error("node", "create", "--driver", "no-such-driver")
    assert "No valid host was found" in unknown
    assert "(HTTP 400)" in unknown

    # ironicclient retries a 409 five times, 2 s apart, before showing it.
    duplicate = cli.error("node", "create", "--driver", "fake-hardware", "--name", "err")
    assert "A node with name err already exists. (HTTP 409)" in duplicate
    assert [n["name"] for n in cli.json("node", "list")] == ["err"]
