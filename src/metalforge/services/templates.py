"""Deploy templates: created, changed and deleted under the rules of their own shape.

A template is checked only for itself -- its name a valid trait name and
unique, each step given once with the same arguments -- not against the
drivers: whether a node can run a step depends on the node's interfaces, so
that is checked when a deployment is requested, validated or previewed
(``conductor.deploy_plan``). A template with a step no driver has yet is
therefore accepted, as Ironic accepts it.

Callers hand in parsed values (``TemplateSpec``), and a PATCH as its
operations: the service checks them against ``PATCH``, applies them and
parses the result as a create's body (``bodies.DeployTemplateCreate``). The
API owns the request bodies' syntax and the views, and renders the
``DeployTemplate`` these functions return (detached, with its steps loaded).
"""

from __future__ import annotations

import copy
import dataclasses
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge.db.models import DeployTemplate, DeployTemplateStep, utcnow
from metalforge.errors import RequestError, bad_request, conflict, not_found
from metalforge.services import lookup, values
from metalforge.services.bodies import DeployTemplateCreate, checked
from metalforge.services.context import Services
from metalforge.services.microversion import Version
from metalforge.services.patching import Operation, Patchable, PatchPolicy, apply

PATCH = PatchPolicy({"extra": Patchable(), "name": Patchable(), "steps": Patchable()})
"""What a JSON patch may change (``/steps/-`` appends a step); the result is checked whole."""


@dataclass(frozen=True)
class StepSpec:
    """One deploy step of a template, as stored: ``interface.step`` with its arguments."""

    interface: str
    step: str
    args: dict[str, Any]
    priority: int


@dataclass(frozen=True)
class TemplateSpec:
    """What a template should be: a request's body, or a stored template after a patch."""

    name: str
    steps: tuple[StepSpec, ...]
    extra: dict[str, Any] = field(default_factory=dict)
    uuid: str | None = None
    """Only for a create: the UUID the client asked for; a new one otherwise."""


def spec_from(body: DeployTemplateCreate) -> TemplateSpec:
    """A parsed body as the service takes it: priorities as integers, no extra as ``{}``."""
    steps = tuple(StepSpec(s.interface, s.step, s.args, int(s.priority)) for s in body.steps)
    return TemplateSpec(body.name, steps, body.extra or {}, body.uuid)


def step_spec(step: DeployTemplateStep) -> StepSpec:
    return StepSpec(step.interface, step.step, step.args, step.priority)


def spec_of(template: DeployTemplate) -> TemplateSpec:
    """``template`` as stored, for a patch to change.

    A deep copy: a patch that changes the dictionaries it is given must not
    change the loaded rows behind the session's back.
    """
    steps = tuple(step_spec(s) for s in template.steps)
    return copy.deepcopy(TemplateSpec(template.name, steps, template.extra, template.uuid))


@lookup.json_suffix_fallback
def find_template(session: Session, ident: str) -> DeployTemplate:
    """By UUID or by name; 404 otherwise."""
    if lookup.is_uuid(ident):
        where = DeployTemplate.uuid == str(uuidlib.UUID(ident))
    else:
        where = DeployTemplate.name == ident
    template = session.scalar(select(DeployTemplate).where(where))
    if template is None:
        raise not_found(f"Deploy template {ident} could not be found.")
    return template


def check_spec(spec: TemplateSpec) -> None:
    """Rules beyond the schema: a trait name, no step twice with the same arguments.

    A step may repeat with other arguments (seed 001: partitioning several
    disks, say), which Ironic refuses; the same step with the same arguments
    twice is an operator's slip, refused.
    """
    if not values.is_valid_trait(spec.name):
        raise bad_request(
            f"Invalid deploy template name {spec.name!r}: it must be a valid trait name; "
            f"{values.why_not_a_trait(spec.name)}"
        )
    duplicates = _repeated_steps(spec.steps)
    if duplicates:
        raise bad_request(
            f"Duplicate deploy steps in deploy template {spec.name}: "
            f"{', '.join(duplicates)} with the same arguments. A step may "
            "repeat in a template only with other arguments."
        )


def _repeated_steps(steps: Sequence[StepSpec]) -> list[str]:
    """``interface.step`` of each step given more than once with equal arguments, sorted."""
    seen: set[tuple[str, str, bytes]] = set()
    repeated: set[str] = set()
    for step in steps:
        key = (step.interface, step.step, orjson.dumps(step.args, option=orjson.OPT_SORT_KEYS))
        if key in seen:
            repeated.add(f"{step.interface}.{step.step}")
        seen.add(key)
    return sorted(repeated)


def _rows(steps: Sequence[StepSpec]) -> list[DeployTemplateStep]:
    return [
        DeployTemplateStep(interface=s.interface, step=s.step, args=s.args, priority=s.priority)
        for s in steps
    ]


def _name_taken(name: str) -> RequestError:
    return conflict(f"A deploy template with name {name} already exists.")


def _refuse_taken(session: Session, name: str, template_uuid: str | None = None) -> None:
    """409 if another template has ``name`` (or ``template_uuid``, for a create)."""
    if session.scalar(select(DeployTemplate.id).where(DeployTemplate.name == name)):
        raise _name_taken(name)
    if template_uuid is None:
        return
    if session.scalar(select(DeployTemplate.id).where(DeployTemplate.uuid == template_uuid)):
        raise conflict(f"A deploy template with UUID {template_uuid} already exists.")


def create_template(svc: Services, spec: TemplateSpec) -> DeployTemplate:
    """Store a new template: 400 for a rule broken, 409 for a name or UUID in use.

    The checks before the insert give the precise message; the unique
    constraints catch a concurrent create that got in between.
    """
    check_spec(spec)
    template_uuid = lookup.check_uuid(spec.uuid) if spec.uuid else str(uuidlib.uuid4())
    try:
        with svc.db.write() as session:
            _refuse_taken(session, spec.name, template_uuid)
            template = DeployTemplate(
                uuid=template_uuid, name=spec.name, extra=spec.extra, steps=_rows(spec.steps)
            )
            session.add(template)
            session.flush()  # ids and created_at, for the caller's view
    except IntegrityError:  # a concurrent create won the race for the name or UUID
        raise _name_taken(spec.name) from None
    return template


def patch_template(
    svc: Services, ident: str, version: Version, ops: Sequence[Operation]
) -> DeployTemplate:
    """Apply the JSON patch ``ops`` (checked against ``PATCH`` before the template is
    read) to the stored template and store the result, checked whole.

    The patch is applied inside the write transaction, on what is stored then,
    so a concurrent change is never overwritten with a stale copy. Steps are
    replaced only when the patch changed them; the template is marked updated
    either way.
    """
    PATCH.check(ops, version)
    try:
        with svc.db.write() as session:
            template = find_template(session, ident)
            before = spec_of(template)
            after = _patched(before, ops)
            check_spec(after)
            if after.name != template.name:
                _refuse_taken(session, after.name)
                template.name = after.name
            template.extra = after.extra
            if after.steps != before.steps:
                template.steps = _rows(after.steps)
            template.updated_at = utcnow()
            session.flush()
            session.refresh(template)
    except IntegrityError:
        raise conflict("A deploy template with that name already exists.") from None
    return template


def _patched(before: TemplateSpec, ops: Sequence[Operation]) -> TemplateSpec:
    """``before`` with ``ops`` applied, parsed as a create's body would be (a removed or
    null ``extra`` is empty)."""
    document = {
        "name": before.name,
        "steps": [dataclasses.asdict(s) for s in before.steps],
        "extra": before.extra,
    }
    after = apply(document, ops)
    if after.get("extra") is None:
        after["extra"] = {}
    return spec_from(checked(DeployTemplateCreate, after, "deploy template"))


def delete_template(svc: Services, ident: str) -> None:
    """Delete the template and its steps; 404 if there is none.

    Nodes that ask for its trait afterwards deploy without it: a trait no
    template is named after selects no steps.
    """
    with svc.db.write() as session:
        session.delete(find_template(session, ident))
