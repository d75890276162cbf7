"""A volume connector or target PATCH, applied by the service: its policy, and values held
to create's rules."""

from __future__ import annotations

from typing import Any

import pytest

from metalforge.drivers.base import POWER_OFF
from metalforge.errors import RequestError
from metalforge.services import volume
from metalforge.services.context import Services
from metalforge.services.patching import Operation
from metalforge.services.volume import ConnectorSpec, TargetSpec
from tests.services.conftest import FakeCaller, add_node, refused

LATEST = (1, 99)
MISSING = "0c0f2a39-5d2b-4a63-9d0f-6d0a1f3c9e11"


def _set(path: str, value: Any) -> list[Operation]:
    return [Operation("replace", path, value, given=True)]


def _connector(svc: Services) -> str:
    node = add_node(svc, power_state=POWER_OFF)
    spec = ConnectorSpec(node.uuid, "iqn", "iqn.2024-01.org:n1", {"a": 1})
    return volume.create(svc, spec, caller=FakeCaller()).uuid


def _target(svc: Services) -> str:
    node = add_node(svc, power_state=POWER_OFF)
    spec = TargetSpec(node.uuid, "iscsi", "vol-a", 0, {"p": 1}, {"e": 1})
    return volume.create(svc, spec, caller=FakeCaller()).uuid


def _stored(svc: Services, kind: volume.Kind, uuid: str) -> dict[str, Any]:
    with svc.db.read() as session:
        return volume.document(volume.find(session, kind, uuid))


def test_a_patch_changes_the_record_and_a_removed_extra_is_empty(svc: Services) -> None:
    uuid = _connector(svc)
    patch = [*_set("/connector_id", "iqn.2024-01.org:n2"), Operation("remove", "/extra")]
    volume.patch(svc, volume.CONNECTORS, uuid, LATEST, patch, caller=FakeCaller())
    stored = _stored(svc, volume.CONNECTORS, uuid)
    assert (stored["connector_id"], stored["extra"]) == ("iqn.2024-01.org:n2", {})


@pytest.mark.parametrize(
    ("kind", "patch", "message"),
    [
        (
            volume.CONNECTORS,
            _set("/uuid", MISSING),
            "Cannot patch /uuid. Only the following can be updated: connector_id, extra, "
            "node_uuid, type",
        ),
        (
            volume.TARGETS,
            _set("extra", {}),
            "Cannot patch extra. Only the following can be updated: boot_index, extra, "
            "node_uuid, properties, volume_id, volume_type",
        ),
        (
            volume.TARGETS,
            _set("/node_uuid", "node-1"),
            "Expected a UUID for node_uuid, but received node-1.",
        ),
    ],
)
def test_a_patch_outside_the_policy_is_refused_before_the_record_is_read(
    svc: Services, kind: volume.Kind, patch: list[Operation], message: str
) -> None:
    with pytest.raises(RequestError) as excinfo:
        volume.patch(svc, kind, MISSING, LATEST, patch, caller=FakeCaller())
    assert refused(400, excinfo) == message


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            _set("/boot_index", "0"),
            "Invalid volume target: boot_index: Input should be a valid integer",
        ),
        (_set("/volume_id", 7), "Invalid volume target: volume_id: Input should be a valid string"),
        (
            _set("/volume_id", "v" * 37),
            "Invalid value for volume_id: at most 36 characters are allowed",
        ),
    ],
)
def test_a_value_create_refuses_is_refused_and_nothing_changes(
    svc: Services, patch: list[Operation], message: str
) -> None:
    uuid = _target(svc)
    before = _stored(svc, volume.TARGETS, uuid)
    with pytest.raises(RequestError) as excinfo:
        volume.patch(svc, volume.TARGETS, uuid, LATEST, patch, caller=FakeCaller())
    assert refused(400, excinfo) == message
    assert _stored(svc, volume.TARGETS, uuid) == before
