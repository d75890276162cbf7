"""A port group PATCH, applied by the service: its policy, and values held to create's rules."""

from __future__ import annotations

from typing import Any

import pytest

from metalforge.errors import RequestError
from metalforge.services import portgroups
from metalforge.services.context import Services
from metalforge.services.patching import Operation
from metalforge.services.portgroups import PortgroupSpec
from tests.services.conftest import FakeCaller, add_node, refused

LATEST = (1, 111)
MISSING = "5a5ea4a6-8ef4-4ac1-8a9b-2b4c9f1a1e60"


def _set(path: str, value: Any) -> list[Operation]:
    return [Operation("replace", path, value, given=True)]


def _group(svc: Services) -> str:
    node = add_node(svc)
    spec = PortgroupSpec(node=node.uuid, name="bond0", mode="active-backup", extra={"a": 1})
    return portgroups.create_portgroup(svc, spec, LATEST, caller=FakeCaller()).uuid


def _stored(svc: Services, uuid: str) -> PortgroupSpec:
    with svc.db.read() as session:
        return portgroups.spec_of(portgroups.find_portgroup(session, uuid))


def test_a_patch_changes_the_groups_values(svc: Services) -> None:
    uuid = _group(svc)
    patch = [*_set("/name", "bond1"), *_set("/standalone_ports_supported", "false")]
    changed = portgroups.patch_portgroup(svc, uuid, LATEST, patch, caller=FakeCaller())
    assert (changed.name, changed.standalone_ports_supported) == ("bond1", False)


@pytest.mark.parametrize(
    ("path", "version", "status", "message"),
    [
        (
            "/internal_info",
            LATEST,
            400,
            "Cannot patch /internal_info. Only the following can be updated: address, extra, "
            "mode, name, node_uuid, properties, standalone_ports_supported, physical_network, "
            "category",
        ),
        ("/mode", (1, 25), 406, "Field mode is not available at API version 1.25"),
        ("/category", (1, 102), 406, "Field category is not available at API version 1.102"),
    ],
)
def test_a_patch_outside_the_policy_is_refused_before_the_group_is_read(
    svc: Services, path: str, version: tuple[int, int], status: int, message: str
) -> None:
    with pytest.raises(RequestError) as excinfo:
        portgroups.patch_portgroup(svc, MISSING, version, _set(path, "x"), caller=FakeCaller())
    assert refused(status, excinfo) == message


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            _set("/name", "n" * 256),
            f"Invalid portgroup: name: {'n' * 256!r} is too long (String should have at most "
            "255 characters)",
        ),
        (_set("/extra", "x"), "Invalid portgroup: extra: Input should be a valid dictionary"),
        (
            [Operation("remove", "/mode")],
            "'mode' is a mandatory attribute and can not be removed",
        ),
        (
            _set("/standalone_ports_supported", 3),
            "Invalid portgroup: standalone_ports_supported/bool: Input should be a valid "
            "boolean, unable to interpret input; standalone_ports_supported/str: Input should "
            "be a valid string",
        ),
    ],
)
def test_a_value_create_refuses_is_refused_and_nothing_changes(
    svc: Services, patch: list[Operation], message: str
) -> None:
    uuid = _group(svc)
    before = _stored(svc, uuid)
    with pytest.raises(RequestError) as excinfo:
        portgroups.patch_portgroup(svc, uuid, LATEST, patch, caller=FakeCaller())
    assert refused(400, excinfo) == message
    assert _stored(svc, uuid) == before
