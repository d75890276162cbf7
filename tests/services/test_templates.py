"""Deploy templates through the service functions, without HTTP.

The API's tests (``tests/api/test_deploy_templates.py``) cover the same
rules through requests; these call ``services.templates`` directly, as any
other caller would, and read back what was stored.
"""

from __future__ import annotations

import dataclasses
import uuid as uuidlib
from typing import Any

import pytest

from metalforge.coordination.hashring import ConductorDirectory
from metalforge.db.engine import Database
from metalforge.db.models import DeployTemplate, DeployTemplateStep
from metalforge.errors import RequestError
from metalforge.services import templates
from metalforge.services.context import Services
from metalforge.services.patching import Operation
from metalforge.services.templates import StepSpec, TemplateSpec
from metalforge.startup import build_registry
from tests.services.conftest import refused
from tests.support.stack import test_settings

RAID1 = {"logical_disks": [{"raid_level": "1", "size_gb": "MAX", "is_root_volume": True}]}
RAID0 = {"logical_disks": [{"raid_level": "0", "size_gb": "MAX", "is_root_volume": True}]}
RAID1_STEP = StepSpec("raid", "apply_configuration", {"raid_config": RAID1}, 90)
RAID0_STEP = StepSpec("raid", "apply_configuration", {"raid_config": RAID0}, 80)
LATEST = (1, 99)
VMX_ON = StepSpec("bios", "apply_configuration", {"settings": [{"name": "VMX", "value": "on"}]}, 95)


@pytest.fixture
def svc(sqlite_db: Database, sqlite_url: str) -> Services:
    settings = test_settings(sqlite_url)
    directory = ConductorDirectory(sqlite_db, settings.conductor.heartbeat_timeout)
    return Services(
        settings=settings, db=sqlite_db, drivers=build_registry(settings), directory=directory
    )


def _spec(name: str, *steps: StepSpec, **kwargs: Any) -> TemplateSpec:
    return TemplateSpec(name, steps, **kwargs)


def _stored(svc: Services, ident: str) -> TemplateSpec:
    """The template as a fresh transaction reads it."""
    with svc.db.read() as session:
        return templates.spec_of(templates.find_template(session, ident))


def _count(svc: Services, model: type[DeployTemplate | DeployTemplateStep] = DeployTemplate) -> int:
    with svc.db.read() as session:
        return len(session.query(model).all())


def test_create_stores_the_template_with_a_new_uuid(svc: Services) -> None:
    created = templates.create_template(
        svc, _spec("CUSTOM_RAID1", RAID1_STEP, VMX_ON, extra={"team": "ops"})
    )
    assert uuidlib.UUID(created.uuid)
    assert created.created_at is not None
    assert created.updated_at is None
    stored = _stored(svc, created.uuid)
    assert stored == TemplateSpec(
        "CUSTOM_RAID1", (RAID1_STEP, VMX_ON), {"team": "ops"}, created.uuid
    )
    assert _stored(svc, "CUSTOM_RAID1") == stored


def test_create_keeps_a_given_uuid_in_its_canonical_form(svc: Services) -> None:
    given = uuidlib.uuid4()
    created = templates.create_template(
        svc, _spec("CUSTOM_RAID1", RAID1_STEP, uuid=given.hex.upper())
    )
    assert created.uuid == str(given)
    assert _stored(svc, str(given)).name == "CUSTOM_RAID1"


def test_create_refuses_a_uuid_that_is_not_one(svc: Services) -> None:
    with pytest.raises(RequestError) as excinfo:
        templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP, uuid="not-a-uuid"))
    assert refused(400, excinfo) == "Expected UUID for uuid: not-a-uuid"
    assert _count(svc) == 0


def test_a_name_in_use_is_a_conflict(svc: Services) -> None:
    first = templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP))
    with pytest.raises(RequestError) as excinfo:
        templates.create_template(svc, _spec("CUSTOM_RAID1", VMX_ON))
    assert refused(409, excinfo) == "A deploy template with name CUSTOM_RAID1 already exists."
    assert _count(svc) == 1
    assert _stored(svc, first.uuid).steps == (RAID1_STEP,)


def test_a_uuid_in_use_is_a_conflict(svc: Services) -> None:
    first = templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP))
    with pytest.raises(RequestError) as excinfo:
        templates.create_template(svc, _spec("CUSTOM_RAID0", RAID0_STEP, uuid=first.uuid))
    assert refused(409, excinfo) == f"A deploy template with UUID {first.uuid} already exists."
    assert _count(svc) == 1


@pytest.mark.parametrize("name", ["raid1", "CUSTOM_raid", "CUSTOM_" + "X" * 249, ""])
def test_a_name_that_is_no_trait_is_refused(svc: Services, name: str) -> None:
    with pytest.raises(RequestError) as excinfo:
        templates.create_template(svc, _spec(name, RAID1_STEP))
    assert "it must be a valid trait name; " in refused(400, excinfo)
    assert _count(svc) == 0


def test_a_standard_trait_is_a_valid_name(svc: Services) -> None:
    templates.create_template(svc, _spec("HW_CPU_X86_VMX", VMX_ON))
    assert _stored(svc, "HW_CPU_X86_VMX").steps == (VMX_ON,)


def test_a_step_twice_with_the_same_arguments_is_refused(svc: Services) -> None:
    again_at_another_priority = dataclasses.replace(VMX_ON, priority=10)
    with pytest.raises(RequestError) as excinfo:
        templates.create_template(
            svc, _spec("CUSTOM_X", VMX_ON, RAID1_STEP, again_at_another_priority)
        )
    message = refused(400, excinfo)
    assert message.startswith(
        "Duplicate deploy steps in deploy template CUSTOM_X: bios.apply_configuration "
        "with the same arguments."
    )
    assert _count(svc) == 0


def test_a_step_may_repeat_with_other_arguments(svc: Services) -> None:
    created = templates.create_template(svc, _spec("CUSTOM_RAID", RAID1_STEP, RAID0_STEP))
    assert _stored(svc, created.uuid).steps == (RAID1_STEP, RAID0_STEP)


def test_steps_are_not_checked_against_the_drivers(svc: Services) -> None:
    """Whether a node can run a step is checked when it deploys, not here."""
    unknown = StepSpec("raid", "no_driver_has_this_step", {}, 10)
    created = templates.create_template(svc, _spec("CUSTOM_LATER", unknown))
    assert _stored(svc, created.uuid).steps == (unknown,)


def _replace(**changes: Any) -> list[Operation]:
    """A JSON patch replacing each of ``changes`` (steps given as ``StepSpec``)."""
    return [
        Operation(
            "replace",
            f"/{name}",
            [dataclasses.asdict(s) for s in value] if name == "steps" else value,
            given=True,
        )
        for name, value in changes.items()
    ]


def test_a_patch_of_the_steps_is_stored(svc: Services) -> None:
    created = templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP))
    patched = templates.patch_template(
        svc, "CUSTOM_RAID1", LATEST, _replace(steps=(VMX_ON, RAID0_STEP))
    )
    assert [s.step for s in patched.steps] == ["apply_configuration", "apply_configuration"]
    assert patched.updated_at is not None
    assert _stored(svc, created.uuid).steps == (VMX_ON, RAID0_STEP)


def test_a_patch_applies_to_the_stored_template(svc: Services) -> None:
    created = templates.create_template(
        svc, _spec("CUSTOM_RAID1", RAID1_STEP, extra={"team": "ops"})
    )
    append = Operation("add", "/steps/-", dataclasses.asdict(VMX_ON), given=True)
    templates.patch_template(svc, created.uuid, LATEST, [append])
    assert _stored(svc, created.uuid) == TemplateSpec(
        "CUSTOM_RAID1", (RAID1_STEP, VMX_ON), {"team": "ops"}, created.uuid
    )


def test_a_patch_below_a_field_is_seen_as_a_change_and_stored(svc: Services) -> None:
    """The patch changes a copy of what is stored: a key added inside ``extra`` is still
    seen as a change (the loaded row is not changed behind the session's back)."""
    created = templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP, extra={"a": 1}))
    templates.patch_template(
        svc, created.uuid, LATEST, [Operation("add", "/extra/b", 2, given=True)]
    )
    assert _stored(svc, created.uuid).extra == {"a": 1, "b": 2}


def test_a_rename_is_stored(svc: Services) -> None:
    created = templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP))
    templates.patch_template(svc, created.uuid, LATEST, _replace(name="CUSTOM_MIRROR"))
    assert _stored(svc, created.uuid).name == "CUSTOM_MIRROR"
    with pytest.raises(RequestError) as excinfo:
        _stored(svc, "CUSTOM_RAID1")
    assert refused(404, excinfo) == "Deploy template CUSTOM_RAID1 could not be found."


def test_a_rename_to_a_name_in_use_is_a_conflict(svc: Services) -> None:
    templates.create_template(svc, _spec("CUSTOM_RAID0", RAID0_STEP))
    created = templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP))
    with pytest.raises(RequestError) as excinfo:
        templates.patch_template(
            svc, created.uuid, LATEST, _replace(name="CUSTOM_RAID0", extra={"x": 1})
        )
    assert refused(409, excinfo) == "A deploy template with name CUSTOM_RAID0 already exists."
    assert _stored(svc, created.uuid) == TemplateSpec(
        "CUSTOM_RAID1", (RAID1_STEP,), {}, created.uuid
    )


def test_a_patch_that_breaks_a_rule_changes_nothing(svc: Services) -> None:
    created = templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP))
    with pytest.raises(RequestError) as excinfo:
        templates.patch_template(
            svc, created.uuid, LATEST, _replace(steps=(RAID1_STEP, RAID1_STEP), extra={"x": 1})
        )
    assert "Duplicate deploy steps" in refused(400, excinfo)
    with pytest.raises(RequestError) as excinfo:
        templates.patch_template(svc, created.uuid, LATEST, _replace(name="not a trait"))
    assert "it must be a valid trait name; " in refused(400, excinfo)
    with svc.db.read() as session:
        template = templates.find_template(session, created.uuid)
        assert template.updated_at is None
        assert templates.spec_of(template).steps == (RAID1_STEP,)


def test_a_patch_of_an_unknown_template_is_not_found(svc: Services) -> None:
    with pytest.raises(RequestError) as excinfo:
        templates.patch_template(svc, "CUSTOM_NONE", LATEST, _replace(name="CUSTOM_OTHER"))
    assert refused(404, excinfo) == "Deploy template CUSTOM_NONE could not be found."


def test_delete_removes_the_template_and_its_steps(svc: Services) -> None:
    created = templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP, VMX_ON))
    kept = templates.create_template(svc, _spec("CUSTOM_RAID0", RAID0_STEP))
    templates.delete_template(svc, created.uuid)
    with pytest.raises(RequestError) as excinfo:
        _stored(svc, created.uuid)
    assert excinfo.value.status == 404
    assert _stored(svc, kept.uuid).steps == (RAID0_STEP,)
    assert _count(svc, DeployTemplateStep) == 1
    with pytest.raises(RequestError) as excinfo:
        templates.delete_template(svc, created.uuid)
    assert refused(404, excinfo) == f"Deploy template {created.uuid} could not be found."


def test_a_path_outside_the_policy_is_refused_before_the_template_is_read(
    svc: Services,
) -> None:
    with pytest.raises(RequestError) as excinfo:
        templates.patch_template(svc, "CUSTOM_NONE", LATEST, _replace(uuid="x"))
    assert refused(400, excinfo) == (
        "Cannot patch /uuid. Only the following can be updated: extra, name, steps"
    )


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        (
            _replace(steps=()),
            "Invalid deploy template: steps: [] is too short (List should have at least 1 "
            "item after validation, not 0)",
        ),
        (
            [Operation("replace", "/steps/0/priority", -1, given=True)],
            "Invalid deploy template: steps/0/priority: Value error, -1 is not an integer "
            f"from 0 to {2**31 - 1} or a string of digits",
        ),
        (
            [Operation("add", "/steps/0/colour", "blue", given=True)],
            "Invalid deploy template: steps/0/colour: Extra inputs are not permitted",
        ),
    ],
)
def test_a_value_create_refuses_is_refused_and_nothing_changes(
    svc: Services, patch: list[Operation], message: str
) -> None:
    created = templates.create_template(svc, _spec("CUSTOM_RAID1", RAID1_STEP))
    with pytest.raises(RequestError) as excinfo:
        templates.patch_template(svc, created.uuid, LATEST, patch)
    assert refused(400, excinfo) == message
    assert _stored(svc, created.uuid) == TemplateSpec(
        "CUSTOM_RAID1", (RAID1_STEP,), {}, created.uuid
    )
