"""The resources issue 25 added, driven as operators drive them: ``baremetal`` and openstacksdk.

Chassis, port groups (with ports in them), volume connectors and targets, VIFs
and shards, each through the CLI's own commands and the sdk's own proxy calls,
against the all-in-one service on a real port.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openstack
import pytest
from openstack.connection import Connection

from tests.clients.conftest import BaremetalCli
from tests.support.stack import LiveServer

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning:openstack")


def _column(rows: list[dict[str, Any]], name: str) -> list[Any]:
    """One column of a ``-f json`` list (ironicclient names columns in either case)."""
    return [row.get(name, row.get(name.upper(), row.get(name.title()))) for row in rows]


def test_chassis_port_groups_volume_vifs_and_shards_with_the_cli(cli: BaremetalCli) -> None:
    chassis = cli.json("chassis", "create", "--description", "rack 7")
    assert chassis["description"] == "rack 7"
    node = cli.json(
        "node", "create", "--driver", "fake-hardware", "--name", "cli-new",
        "--chassis-uuid", chassis["uuid"], "--shard", "east", "--network-interface", "flat",
    )  # fmt: skip
    assert node["chassis_uuid"] == chassis["uuid"]
    assert _column(cli.json("node", "list", "--chassis", chassis["uuid"]), "uuid") == [node["uuid"]]
    assert "contains nodes" in cli.error("chassis", "delete", chassis["uuid"])

    group = cli.json(
        "port", "group", "create", "--node", node["uuid"], "--name", "bond0",
        "--address", "52:54:00:cd:00:01", "--mode", "802.3ad", "--property", "miimon=100",
    )  # fmt: skip
    assert (group["mode"], group["properties"]) == ("802.3ad", {"miimon": 100})
    port = cli.json(
        "port", "create", "52:54:00:cd:00:02", "--node", node["uuid"], "--port-group", "bond0",
    )  # fmt: skip
    assert port["portgroup_uuid"] == group["uuid"]
    members = cli.json("port", "list", "--port-group", "bond0")
    assert _column(members, "uuid") == [port["uuid"]]
    cli.run("port", "group", "set", "bond0", "--extra", "rack=7")
    assert cli.json("port", "group", "show", "bond0")["extra"] == {"rack": 7}

    vif = str(uuid.uuid4())
    cli.run("node", "vif", "attach", node["uuid"], vif)
    assert _column(cli.json("node", "vif", "list", node["uuid"]), "id") == [vif]
    cli.run("node", "vif", "detach", node["uuid"], vif)
    assert cli.json("node", "vif", "list", node["uuid"]) == []

    connector = cli.json(
        "volume", "connector", "create", "--node", node["uuid"], "--type", "iqn",
        "--connector-id", "iqn.2026-11.org.example:node",
    )  # fmt: skip
    target = cli.json(
        "volume", "target", "create", "--node", node["uuid"], "--type", "iscsi",
        "--boot-index", "0", "--volume-id", "vol-1",
    )  # fmt: skip
    connectors = cli.json("volume", "connector", "list", "--node", "cli-new")
    assert _column(connectors, "uuid") == [connector["uuid"]]
    assert cli.json("volume", "target", "show", target["uuid"])["volume_id"] == "vol-1"

    listed = cli.json("shard", "list")
    shards = dict(zip(_column(listed, "name"), _column(listed, "count"), strict=True))
    assert shards["east"] == 1

    # Deleting the node takes its ports, groups and volume records with it.
    cli.run("node", "delete", node["uuid"])
    assert cli.json("port", "group", "list") == []
    assert cli.json("volume", "connector", "list") == []
    cli.run("chassis", "delete", chassis["uuid"])


@pytest.fixture
def conn(live_server: LiveServer) -> Iterator[Connection]:
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


def test_chassis_port_groups_volume_and_vifs_with_openstacksdk(conn: Connection) -> None:
    bm = conn.baremetal
    chassis = bm.create_chassis(description="sdk rack")
    node = bm.create_node(
        driver="fake-hardware", name="sdk-new", chassis_uuid=chassis.id, network_interface="flat"
    )
    assert bm.get_node(node.id).chassis_id == chassis.id
    assert [c.id for c in bm.chassis()] == [chassis.id]

    group = bm.create_port_group(node_id=node.id, name="sdk-bond", address="52:54:00:cd:01:01")
    port = bm.create_port(node_id=node.id, address="52:54:00:cd:01:02", port_group_id=group.id)
    assert bm.get_port(port.id).port_group_id == group.id
    assert [g.id for g in bm.port_groups(node=node.id)] == [group.id]
    bm.update_port_group(group, extra={"from": "sdk"})
    assert bm.get_port_group(group.id).extra == {"from": "sdk"}

    vif = str(uuid.uuid4())
    bm.attach_vif_to_node(node, vif)
    assert bm.list_node_vifs(node) == [vif]
    bm.detach_vif_from_node(node, vif)
    assert bm.list_node_vifs(node) == []

    connector = bm.create_volume_connector(
        node_id=node.id, type="iqn", connector_id="iqn.2026-11.org.example:sdk"
    )
    target = bm.create_volume_target(
        node_id=node.id, volume_type="iscsi", boot_index=0, volume_id="sdk-vol"
    )
    assert [c.id for c in bm.volume_connectors(node=node.id)] == [connector.id]
    assert bm.get_volume_target(target.id).volume_id == "sdk-vol"

    bm.delete_port(port)
    bm.delete_port_group(group)
    bm.delete_volume_connector(connector)
    bm.delete_volume_target(target)
    bm.delete_node(node)
    bm.delete_chassis(chassis)
    assert list(bm.chassis()) == []
