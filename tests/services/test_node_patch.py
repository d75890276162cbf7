"""A node PATCH, applied by the service: its policy, the caller's field rules, the values.

The route only parses the operations; which fields a patch may touch (from
which microversion), who may touch each and what values it may leave are
asked here of ``nodes.update`` directly.
"""

from __future__ import annotations

from typing import Any

import pytest

from metalforge.db.models import Node
from metalforge.errors import RequestError
from metalforge.services import node_patch, nodes
from metalforge.services.caller import NodeTarget, Target
from metalforge.services.context import Services
from metalforge.services.patching import Operation
from tests.services.conftest import FakeCaller, add_node, refused, stored_node

LATEST = (1, 115)
MISSING = "3f0b8d1c-6a9e-4f55-9f63-0d1c2b3a4e5f"


def _set(path: str, value: Any) -> list[Operation]:
    return [Operation("replace", path, value, given=True)]


def _update(
    svc: Services, ident: str, ops: list[Operation], caller: FakeCaller | None = None
) -> None:
    nodes.update(
        svc,
        ident,
        LATEST,
        ops,
        lambda node, _steps: None,
        caller=caller or FakeCaller(),
        reset_interfaces=None,
        actor=None,
    )


def _refusal(svc: Services, ident: str, ops: list[Operation], version: tuple[int, int]) -> Any:
    with pytest.raises(RequestError) as excinfo:
        nodes.update(
            svc,
            ident,
            version,
            ops,
            lambda node, _steps: None,
            caller=FakeCaller(),
            reset_interfaces=None,
            actor=None,
        )
    return excinfo


@pytest.mark.parametrize(
    ("path", "version", "status", "message"),
    [
        (
            "/traits",
            LATEST,
            400,
            "Cannot update node traits via node patch. Node traits should be updated via "
            "the node traits API.",
        ),
        ("/power_state", LATEST, 400, "Cannot patch /power_state. Only the following can"),
        ("/owner", (1, 49), 406, "Field owner is not available at API version 1.49"),
        ("/firmware_interface", (1, 85), 406, "Field firmware_interface is not available"),
    ],
)
def test_a_patch_outside_the_policy_is_refused_before_the_node_is_read(
    svc: Services, path: str, version: tuple[int, int], status: int, message: str
) -> None:
    excinfo = _refusal(svc, MISSING, _set(path, "x"), version)
    assert refused(status, excinfo).startswith(message)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (_set("/name", "n" * 256), "Invalid value for name: at most 255 characters are allowed"),
        (_set("/extra", [1]), "Invalid value for extra: must be a JSON object"),
        (_set("/maintenance", 1), "Invalid value for maintenance: must be a boolean"),
        (
            _set("/protected", "maybe"),
            "Invalid value for protected: 'maybe' is not a valid boolean",
        ),
        (_set("/description", 5), "Invalid value for description: must be a string"),
    ],
)
def test_a_value_create_refuses_is_refused_and_nothing_changes(
    svc: Services, patch: list[Operation], message: str
) -> None:
    node = add_node(svc, name="n1", extra={"a": 1})
    excinfo = _refusal(svc, node.uuid, patch, LATEST)
    assert refused(400, excinfo) == message
    stored = stored_node(svc, node.id)
    assert (stored.name, stored.extra, stored.epoch) == ("n1", {"a": 1}, node.epoch)


def test_each_fields_rule_is_asked_of_the_caller_on_the_node(svc: Services) -> None:
    node = add_node(svc, owner="p1", lessee="p2")
    caller = FakeCaller(allow=lambda rule, _target: rule != "baremetal:node:update:owner")
    patch = [*_set("/extra", {"b": 2}), *_set("/owner", "p3")]
    with pytest.raises(RequestError) as excinfo:
        _update(svc, node.uuid, patch, caller)
    assert refused(403, excinfo) == (
        "Access was denied to the following resource: baremetal:node:update:owner"
    )
    assert caller.asked == [
        ("baremetal:node:update_extra", NodeTarget("p1", "p2")),
        ("baremetal:node:update:owner", NodeTarget("p1", "p2")),
    ]
    assert stored_node(svc, node.id).owner == "p1"


def _no_passwords(rule: str, _target: Target) -> bool:
    return rule != node_patch.SHOW_PASSWORD


def test_moving_the_bmc_keeping_its_credentials_needs_them_again(svc: Services) -> None:
    info = {"ipmi_address": "10.0.0.1", "ipmi_password": "secret"}
    node = add_node(svc, driver_info=info)
    moved = [Operation("replace", "/driver_info/ipmi_address", "10.0.0.2", given=True)]
    with pytest.raises(RequestError) as excinfo:
        _update(svc, node.uuid, moved, FakeCaller(allow=_no_passwords))
    assert refused(403, excinfo) == (
        "Changing ipmi_address of a node with stored credentials needs the credentials "
        "(ipmi_password) given again in the same request."
    )
    again = [*moved, Operation("replace", "/driver_info/ipmi_password", "new", given=True)]
    _update(svc, node.uuid, again, FakeCaller(allow=_no_passwords))
    stored: Node = stored_node(svc, node.id)
    assert stored.driver_info == {"ipmi_address": "10.0.0.2", "ipmi_password": "new"}


def test_display_name_in_instance_info_names_an_unnamed_instance(svc: Services) -> None:
    """Ironic copies ``instance_info.display_name`` into ``instance_name`` when a patch
    changes ``instance_info`` and the node has no instance name; a given name stays."""
    node = add_node(svc)
    _update(svc, node.uuid, _set("/instance_info", {"display_name": "web-1"}))
    assert stored_node(svc, node.id).instance_name == "web-1"
    _update(svc, node.uuid, _set("/instance_info", {"display_name": "web-2"}))
    assert stored_node(svc, node.id).instance_name == "web-1"

    named = add_node(svc)
    patch = [*_set("/instance_info", {"display_name": "db-1"}), *_set("/instance_name", "mine")]
    _update(svc, named.uuid, patch)
    assert stored_node(svc, named.id).instance_name == "mine"

    untouched = add_node(svc, instance_info={"display_name": "old"})
    _update(svc, untouched.uuid, _set("/extra", {"a": 1}))
    assert stored_node(svc, untouched.id).instance_name is None
