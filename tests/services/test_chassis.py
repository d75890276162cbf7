"""A chassis PATCH, applied by the service: its policy, and values held to create's rules."""

from __future__ import annotations

import pytest

from metalforge.errors import RequestError
from metalforge.services import chassis
from metalforge.services.chassis import ChassisSpec
from metalforge.services.context import Services
from metalforge.services.patching import Operation
from tests.services.conftest import refused

LATEST = (1, 99)


def _set(path: str, value: object) -> list[Operation]:
    return [Operation("replace", path, value, given=True)]


def test_a_patch_changes_the_description_and_extra(svc: Services) -> None:
    made = chassis.create_chassis(svc, ChassisSpec("rack 1", {"row": 1}))
    patch = [*_set("/description", "rack 2"), Operation("add", "/extra/aisle", 3, given=True)]
    changed = chassis.patch_chassis(svc, made.uuid, LATEST, patch)
    assert (changed.description, changed.extra) == ("rack 2", {"row": 1, "aisle": 3})


def test_a_path_outside_the_policy_is_refused_before_the_chassis_is_read(svc: Services) -> None:
    missing = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"
    with pytest.raises(RequestError) as excinfo:
        chassis.patch_chassis(svc, missing, LATEST, _set("/uuid", missing))
    assert refused(400, excinfo) == (
        "Cannot patch /uuid. Only the following can be updated: description, extra"
    )


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            _set("/description", "x" * 256),
            f"Invalid chassis: description: {'x' * 256!r} is too long (String should have at "
            "most 255 characters)",
        ),
        (_set("/extra", [1]), "Invalid chassis: extra: Input should be a valid dictionary"),
    ],
)
def test_a_value_create_refuses_is_refused_and_nothing_changes(
    svc: Services, patch: list[Operation], message: str
) -> None:
    made = chassis.create_chassis(svc, ChassisSpec("rack 1", {"row": 1}))
    with pytest.raises(RequestError) as excinfo:
        chassis.patch_chassis(svc, made.uuid, LATEST, patch)
    assert refused(400, excinfo) == message
    with svc.db.read() as session:
        stored = chassis.find_chassis(session, made.uuid)
        assert (stored.description, stored.extra) == ("rack 1", {"row": 1})
