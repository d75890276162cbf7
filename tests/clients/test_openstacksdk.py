"""openstacksdk's bare metal proxy (what metalsmith and Ansible use) against a live metalforge.

The sdk discovers the API itself (``GET /`` then ``GET /v1/``), picks its own
microversion per resource (1.109 for nodes, 1.37 for traits, 1.49 for
conductors, 1.86 for drivers, 1.101 for ports) and parses errors its own way,
so it exercises different corners than the CLI: discovery documents, mixed
microversions in one session, ``next`` links merged into its own query, and
its ``wait=True`` loops.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import openstack
import pytest
from openstack import exceptions
from openstack.connection import Connection

from tests.support.stack import LiveServer

TIMEOUT = 60

# openstacksdk raises pending-deprecation warnings about its own internals on every call.
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning:openstack")


@pytest.fixture
def conn(live_server: LiveServer) -> Iterator[Connection]:
    """A no-auth connection configured only by arguments, never by clouds.yaml or OS_*."""
    connection = openstack.connect(
        load_yaml_config=False,
        load_envvars=False,
        auth_type="none",
        baremetal_endpoint_override=live_server.url,
    )
    try:
        yield connection
    finally:
        connection.close()


def test_enroll_to_active_and_back_with_wait(conn: Connection) -> None:
    bm = conn.baremetal
    endpoint = bm.get_endpoint_data()
    assert endpoint is not None
    assert endpoint.max_microversion == (1, 115)
    assert endpoint.min_microversion == (1, 1)

    node = bm.create_node(
        driver="fake-hardware",
        name="sdk-life",
        resource_class="rc-sdk",
        driver_info={"fake_address": "10.0.0.2", "fake_password": "s3cret"},
    )
    assert (node.provision_state, node.power_state) == ("enroll", None)
    assert node.driver_info == {"fake_address": "10.0.0.2", "fake_password": "******"}

    node = bm.set_node_provision_state(node, "manage", wait=True, timeout=TIMEOUT)
    assert (node.provision_state, node.target_provision_state) == ("manageable", None)
    node = bm.set_node_provision_state(node, "provide", wait=True, timeout=TIMEOUT)
    assert (node.provision_state, node.power_state) == ("available", "power off")

    node = bm.set_node_provision_state(
        node,
        "active",
        config_drive={"meta_data": {"hostname": "sdk-life"}, "user_data": None},
        wait=True,
        timeout=TIMEOUT,
    )
    assert (node.provision_state, node.power_state) == ("active", "power on")
    assert node.instance_info == {"configdrive": "******"}

    bm.set_node_provision_state(node, "deleted")
    # fail=True is the default; named, the sdk's overloads type the result as a list.
    [node] = bm.wait_for_nodes_provision_state([node], "available", timeout=TIMEOUT, fail=True)
    assert node.instance_info == {}
    assert node.last_error is None

    # Asked for "available", the sdk creates at API 1.10, where nodes start available
    # (with an unknown power state); asked for "manageable" it follows with a manage.
    ready = bm.create_node(driver="fake-hardware", name="sdk-ready", provision_state="available")
    assert (ready.provision_state, ready.power_state) == ("available", None)
    assert bm.get_node("sdk-ready").provision_state == "available"
    managed = bm.create_node(driver="fake-hardware", provision_state="manageable")
    assert (managed.provision_state, managed.power_state) == ("manageable", "power off")


def test_update_traits_power_maintenance_and_errors(conn: Connection) -> None:
    bm = conn.baremetal
    node = bm.create_node(driver="fake-hardware", name="sdk-edit")

    node = bm.update_node(node, extra={"rack": "r2"}, description="db", properties={"cpus": 4})
    assert (node.extra, node.description, node.properties) == ({"rack": "r2"}, "db", {"cpus": 4})
    node = bm.patch_node(
        node,
        [
            {"op": "add", "path": "/instance_info/image_source", "value": "http://img/a.raw"},
            {"op": "add", "path": "/extra/row", "value": 7},
            {"op": "remove", "path": "/extra/rack"},
            {"op": "replace", "path": "/name", "value": "sdk-edited"},
        ],
    )
    assert node.instance_info == {"image_source": "http://img/a.raw"}
    assert node.extra == {"row": 7}
    assert bm.get_node("sdk-edited").id == node.id

    bm.add_node_trait(node, "CUSTOM_A")
    assert bm.get_node(node).traits == ["CUSTOM_A"]
    bm.set_node_traits(node, ["HW_CPU_X86_AVX2", "CUSTOM_B"])
    assert sorted(bm.get_node(node).traits) == ["CUSTOM_B", "HW_CPU_X86_AVX2"]
    bm.remove_node_trait(node, "CUSTOM_B")
    assert bm.get_node(node).traits == ["HW_CPU_X86_AVX2"]
    with pytest.raises(exceptions.NotFoundException, match="doesn't have a trait 'CUSTOM_B'"):
        bm.remove_node_trait(node, "CUSTOM_B", ignore_missing=False)
    with pytest.raises(exceptions.BadRequestException, match="Invalid trait"):
        bm.add_node_trait(node, "not-a-trait")

    bm.set_node_power_state(node, "power on", wait=True, timeout=TIMEOUT)
    assert bm.get_node(node).power_state == "power on"
    bm.set_node_power_state(node, "power off", wait=True, timeout=TIMEOUT)
    assert bm.get_node(node).power_state == "power off"

    bm.set_node_maintenance(node, reason="disk swap")
    shown = bm.get_node(node)
    assert (shown.is_maintenance, shown.maintenance_reason) == (True, "disk swap")
    bm.unset_node_maintenance(node)
    shown = bm.get_node(node)
    assert (shown.is_maintenance, shown.maintenance_reason) == (False, None)

    results = bm.validate_node(node)
    assert all(results[name].result for name in ("boot", "deploy", "power")), results

    with pytest.raises(exceptions.NotFoundException, match="Node nope could not be found"):
        bm.get_node("nope")
    with pytest.raises(exceptions.BadRequestException, match='while it is in state "enroll"'):
        bm.set_node_provision_state(node, "provide")
    bm.delete_node(node)
    assert bm.find_node("sdk-edited") is None


def test_listing_ports_conductors_and_drivers(  # noqa: PLR0915 - a linear walk through the SDK's list calls
    conn: Connection, live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bm = conn.baremetal
    nodes = [
        bm.create_node(driver="fake-hardware", name=f"sdk-list-{i}", resource_class="rc-list")
        for i in range(3)
    ]
    bm.create_node(driver="fake-hardware", name="sdk-other", resource_class="rc-other")
    bm.set_node_provision_state(nodes[0], "manage", wait=True, timeout=TIMEOUT)
    names = {n.name for n in nodes}

    short = {n.name: n for n in bm.nodes()}
    assert set(short) == {*names, "sdk-other"}
    assert short["sdk-list-0"].provision_state == "manageable"
    detailed = {n.name: n for n in bm.nodes(details=True)}
    assert detailed["sdk-list-1"].driver == "fake-hardware"
    assert detailed["sdk-list-1"].resource_class == "rc-list"
    # Pages of one and two: the sdk follows ``next`` and keeps its filters on each page.
    assert {n.name for n in bm.nodes(limit=1)} == {*names, "sdk-other"}
    assert {n.name for n in bm.nodes(details=True, limit=2, resource_class="rc-list")} == names
    assert [n.name for n in bm.nodes(provision_state="manageable")] == ["sdk-list-0"]
    narrow = list(bm.nodes(fields=["uuid", "name", "traits"], resource_class="rc-other"))
    assert [(n.name, n.traits, n.driver) for n in narrow] == [("sdk-other", [], None)]

    port = bm.create_port(node_id=nodes[1].id, address="52:54:00:12:34:56", is_pxe_enabled=False)
    assert (port.address, port.node_id, port.is_pxe_enabled) == (
        "52:54:00:12:34:56",
        nodes[1].id,
        False,
    )
    assert [p.id for p in bm.ports()] == [port.id]
    assert [p.node_id for p in bm.ports(details=True, node="sdk-list-1")] == [nodes[1].id]
    assert list(bm.ports(node="sdk-list-2")) == []
    port = bm.update_port(port, extra={"slot": "a1"}, is_pxe_enabled=True)
    assert (port.extra, port.is_pxe_enabled) == ({"slot": "a1"}, True)
    assert bm.get_port(port.id).extra == {"slot": "a1"}
    bm.delete_port(port)
    assert list(bm.ports()) == []

    [conductor] = bm.conductors()
    assert (conductor.hostname, conductor.alive) == ("test-conductor", True)
    assert bm.get_conductor("test-conductor").drivers == ["fake-hardware"]
    [driver] = bm.drivers(details=True)
    assert (driver.name, driver.hosts) == ("fake-hardware", ["test-conductor"])
    assert driver.default_deploy_interface == "fake"
    assert bm.get_driver("fake-hardware").default_power_interface == "fake"

    # The environment-only configuration metalsmith documents (OS_AUTH_TYPE + OS_ENDPOINT).
    for name in [k for k in os.environ if k.startswith("OS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OS_AUTH_TYPE", "none")
    monkeypatch.setenv("OS_ENDPOINT", live_server.url)
    from_env = openstack.connect(load_yaml_config=False)
    try:
        assert {n.name for n in from_env.baremetal.nodes()} == {*names, "sdk-other"}
    finally:
        from_env.close()


def test_runbooks_through_the_sdk(conn: Connection) -> None:
    bm = conn.baremetal
    steps = [{"interface": "raid", "step": "delete_configuration", "args": {}, "order": 1}]
    name = "CUSTOM_SDK_RAID_RESET"
    runbook = bm.create_runbook(name=name, steps=steps, description="arrays off")
    assert (runbook.name, runbook.description, runbook.traits) == (
        name,
        "arrays off",
        [],
    )
    bm.add_runbook_trait(runbook, "CUSTOM_SDK")
    assert bm.get_runbook(name).traits == ["CUSTOM_SDK"]
    bm.update_runbook(runbook.id, extra={"k": "v"})
    assert bm.get_runbook(runbook.id).extra == {"k": "v"}
    assert [r.id for r in bm.runbooks()] == [runbook.id]

    node = bm.create_node(driver="fake-hardware", name="sdk-runbook")
    node = bm.set_node_provision_state(node, "manage", wait=True, timeout=TIMEOUT)
    # The proxy's call takes no runbook; the node resource's does, at the node's
    # microversion (1.109): below 1.112 the runbook's name must be one of the node's traits.
    bm.add_node_trait(node, "CUSTOM_SDK")
    with pytest.raises(exceptions.BadRequestException, match="not been approved"):
        node.set_provision_state(bm, "clean", runbook=name)
    bm.add_node_trait(node, name)
    node = node.set_provision_state(bm, "clean", runbook=name, wait=True, timeout=TIMEOUT)
    assert (node.provision_state, node.last_error) == ("manageable", None)

    bm.delete_runbook(runbook)
    with pytest.raises(exceptions.NotFoundException):
        bm.get_runbook(runbook.id)
