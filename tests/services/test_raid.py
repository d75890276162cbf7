"""The target RAID configuration through ``services.raid``, without HTTP.

A configuration is checked by the node's RAID interface when it is set, and
stored fenced like every node write: these tests read back the stored
configuration, the epoch and the history, and that a refusal kept the
configuration the node had.
"""

from __future__ import annotations

from typing import Any

import pytest

from metalforge import states
from metalforge.db.models import Node
from metalforge.errors import NodeLocked, RequestError
from metalforge.services import raid
from metalforge.services.context import Services
from tests.services.conftest import add_node, bump_after_find, history_by_user, refused, stored_node

LATEST = (1, 115)
RAID1 = {"logical_disks": [{"raid_level": "1", "size_gb": "MAX", "is_root_volume": True}]}
TWO_DISKS = {
    "logical_disks": [
        {"raid_level": "1", "size_gb": 100, "is_root_volume": True},
        {"raid_level": "5", "size_gb": "MAX", "disk_type": "ssd"},
    ]
}


def _add_node(svc: Services, **fields: Any) -> Node:
    return add_node(svc, states.MANAGEABLE, **{"name": "rack1-n1", **fields})


def _node(svc: Services, node_id: int) -> Node:
    return stored_node(svc, node_id)


def test_set_stores_the_configuration_fenced_and_recorded(svc: Services) -> None:
    node = _add_node(svc)
    raid.set_target(svc, node.uuid, LATEST, TWO_DISKS, "alice")
    stored = _node(svc, node.id)
    assert stored.target_raid_config == TWO_DISKS
    assert stored.raid_config == {}, "only the clean step builds it"
    assert stored.epoch == node.epoch + 1
    assert history_by_user(svc, node.id) == [
        ("raid", "target RAID configuration set, 2 logical disk(s)", "alice")
    ]


def test_a_new_configuration_replaces_the_old_and_an_empty_one_clears_it(svc: Services) -> None:
    node = _add_node(svc, target_raid_config=TWO_DISKS)
    raid.set_target(svc, "rack1-n1", LATEST, RAID1, "alice")
    assert _node(svc, node.id).target_raid_config == RAID1
    raid.set_target(svc, node.uuid, LATEST, {}, "bob")
    stored = _node(svc, node.id)
    assert stored.target_raid_config == {}
    assert stored.epoch == node.epoch + 2
    assert history_by_user(svc, node.id) == [
        ("raid", "target RAID configuration set, 1 logical disk(s)", "alice"),
        ("raid", "target RAID configuration cleared", "bob"),
    ]


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"logical_disks": [{"raid_level": "7", "size_gb": "MAX"}]}, "raid_level '7'"),
        ({"logical_disks": [{"raid_level": "1"}]}, "needs size_gb"),
        ({"logical_disks": [{"raid_level": "1", "size_gb": 0}]}, "size_gb"),
        ({"logical_disks": [{"raid_level": "1", "size_gb": 10, "colour": "red"}]}, "colour"),
    ],
)
def test_an_invalid_configuration_is_400_and_the_old_one_stays(
    svc: Services, config: dict[str, Any], words: str
) -> None:
    node = _add_node(svc, target_raid_config=RAID1)
    with pytest.raises(RequestError) as raised:
        raid.set_target(svc, node.uuid, LATEST, config, "alice")
    message = refused(400, raised)
    assert message.startswith("Invalid target RAID configuration: ")
    assert words in message
    stored = _node(svc, node.id)
    assert (stored.target_raid_config, stored.epoch) == (RAID1, node.epoch)
    assert history_by_user(svc, node.id) == []


def test_a_node_without_raid_is_404_but_may_be_cleared(svc: Services) -> None:
    node = _add_node(svc, raid_interface="no-raid", target_raid_config=RAID1)
    with pytest.raises(RequestError) as raised:
        raid.set_target(svc, node.uuid, LATEST, TWO_DISKS, None)
    assert "its raid interface is no-raid" in refused(404, raised)
    assert _node(svc, node.id).target_raid_config == RAID1
    raid.set_target(svc, node.uuid, LATEST, {}, None)
    assert _node(svc, node.id).target_raid_config == {}


def test_a_raid_interface_the_driver_lacks_is_400(svc: Services) -> None:
    node = _add_node(svc, raid_interface="hw-raid-9000")
    with pytest.raises(RequestError) as raised:
        raid.set_target(svc, node.uuid, LATEST, RAID1, None)
    assert "hw-raid-9000" in refused(400, raised)
    assert _node(svc, node.id).target_raid_config == {}


def test_a_node_a_conductor_holds_is_refused_unchanged(svc: Services) -> None:
    node = _add_node(svc, reservation="conductor-1", target_raid_config=RAID1)
    for config in (TWO_DISKS, {}):
        with pytest.raises(NodeLocked, match="locked by host conductor-1"):
            raid.set_target(svc, node.uuid, LATEST, config, "alice")
    stored = _node(svc, node.id)
    assert (stored.target_raid_config, stored.epoch) == (RAID1, node.epoch)
    assert history_by_user(svc, node.id) == []


def test_a_node_changed_since_it_was_read_is_not_written_over(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _add_node(svc)
    bump_after_find(monkeypatch)
    with pytest.raises(RequestError) as raised:
        raid.set_target(svc, node.uuid, LATEST, RAID1, "alice")
    assert "changed while it was being updated" in refused(409, raised)
    stored = _node(svc, node.id)
    assert (stored.target_raid_config, stored.epoch) == ({}, node.epoch)
    assert history_by_user(svc, node.id) == []
