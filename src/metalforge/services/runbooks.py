"""Runbooks: named clean or service steps, and who may keep, change and use them.

A runbook belongs to a project (``owner``) or to the deployment; a public
one belongs to no project and any project may use it. A project-scoped
caller creates runbooks only for its own project and never public ones; only
the deployment's members make a runbook public or give it to a project.
These are Ironic's rules, and the caller's rights come from its policy
(``baremetal:runbook:*``), asked here through the ``Caller`` once the
runbook's owner is known.

Whether a node may run a runbook is decided by traits, so that an operator
approves runbooks per kind of machine: below API 1.112 the runbook's name
must be one of the node's traits; from 1.112 the node must carry one of the
runbook's own ``traits`` (a runbook with none is usable nowhere). Whether the
node's interfaces have the steps is checked when the runbook is used, as for
any manual steps, because that depends on the node.

A runbook's steps run in ``order`` (ties in the order they are listed).
"""

from __future__ import annotations

import copy
import dataclasses
import re
import uuid as uuidlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Select, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge.db.models import Node, Runbook, RunbookStep, RunbookTrait, utcnow
from metalforge.errors import RequestError, bad_request, conflict, not_acceptable, not_found
from metalforge.services import lookup, values
from metalforge.services.bodies import RunbookCreate, checked
from metalforge.services.caller import Caller, RunbookTarget
from metalforge.services.context import Services
from metalforge.services.microversion import Version, fmt
from metalforge.services.patching import Operation, Patchable, PatchPolicy, apply

SINCE: Version = (1, 92)
TRAITS_SINCE: Version = (1, 112)
"""Runbook ``traits`` (and ``description``, and names that are not traits)."""

GET = "baremetal:runbook:get"
UPDATE = "baremetal:runbook:update"
UPDATE_OWNER = "baremetal:runbook:update:owner"
UPDATE_PUBLIC = "baremetal:runbook:update:public"
USE = "baremetal:runbook:use"

PATCH = PatchPolicy(
    {
        "disable_ramdisk": Patchable(),
        "extra": Patchable(),
        "name": Patchable(),
        "owner": Patchable(),
        "public": Patchable(),
        "steps": Patchable(),
        "description": Patchable(since=TRAITS_SINCE),
    }
)
"""What a JSON patch may change; traits change through ``/traits``."""

_NAME = re.compile(r"^[A-Za-z0-9\-._~]+$")


@dataclass(frozen=True)
class StepSpec:
    """One step as stored: ``interface.step`` with its arguments, run in ``order``."""

    interface: str
    step: str
    args: dict[str, Any]
    order: int


@dataclass(frozen=True)
class RunbookSpec:
    """What a runbook should be: a create's body, or a stored runbook after a patch."""

    name: str
    steps: tuple[StepSpec, ...]
    extra: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    owner: str | None = None
    public: bool = False
    disable_ramdisk: bool = False
    uuid: str | None = None
    """Only for a create: the UUID the client asked for; a new one otherwise."""


@dataclass(frozen=True)
class Creator:
    """Who creates a runbook: the deployment (``system``), or one project."""

    system: bool
    project: str | None


def spec_from(body: RunbookCreate) -> RunbookSpec:
    """A parsed body as the service takes it: orders as integers, no extra as ``{}``."""
    steps = tuple(StepSpec(s.interface, s.step, s.args, int(s.order)) for s in body.steps)
    return RunbookSpec(
        name=body.name,
        steps=steps,
        extra=body.extra or {},
        description=body.description,
        owner=body.owner,
        public=bool(body.public),
        disable_ramdisk=bool(body.disable_ramdisk),
        uuid=body.uuid,
    )


def spec_of(runbook: Runbook) -> RunbookSpec:
    """``runbook`` as stored, deep-copied: a patch must not change the loaded rows."""
    steps = tuple(StepSpec(s.interface, s.step, s.args, s.order) for s in runbook.steps)
    return copy.deepcopy(
        RunbookSpec(
            name=runbook.name,
            steps=steps,
            extra=runbook.extra,
            description=runbook.description,
            owner=runbook.owner,
            public=runbook.public,
            disable_ramdisk=runbook.disable_ramdisk,
            uuid=runbook.uuid,
        )
    )


def trait_names(runbook: Runbook) -> list[str]:
    return [t.trait for t in runbook.traits]


def not_found_error(ident: str) -> RequestError:
    return not_found(f"Runbook {ident} could not be found.")


def _where(ident: str) -> Any:
    if lookup.is_uuid(ident):
        return Runbook.uuid == str(uuidlib.UUID(ident))
    return Runbook.name == ident


def find_runbook(session: Session, ident: str) -> Runbook:
    """By UUID or by name; 404 otherwise."""
    runbook = session.scalar(select(Runbook).where(_where(ident)))
    if runbook is None:
        raise not_found_error(ident)
    return runbook


def owner_of(connection: Connection, ident: str) -> tuple[str | None, bool]:
    """The runbook's owner and whether it is public, for an authorization; 404 if none."""
    row = connection.execute(select(Runbook.owner, Runbook.public).where(_where(ident))).first()
    if row is None:
        raise not_found_error(ident)
    return row.owner, bool(row.public)


def listing(project: str | None) -> Select[Any]:
    """Every runbook, or those a project may see: its own and the public ones."""
    stmt = select(Runbook)
    if project is not None:
        stmt = stmt.where(or_(Runbook.owner == project, Runbook.public.is_(True)))
    return stmt


# -- rules ------------------------------------------------------------------


def check_spec(spec: RunbookSpec, *, trait_name: bool) -> None:
    """Rules beyond the body's schema: the name, and no step twice.

    ``trait_name``: the name must be a trait (creates below 1.112); otherwise
    any logical name of ``[A-Za-z0-9-._~]`` does.
    """
    if trait_name and not values.is_valid_trait(spec.name):
        raise bad_request(
            f"Invalid runbook name {spec.name!r}: below API version {fmt(TRAITS_SINCE)} it "
            "must be a valid trait name (a standard trait or ^CUSTOM_[A-Z0-9_]+$)"
        )
    if not _NAME.match(spec.name):
        raise bad_request(
            f"Invalid runbook name {spec.name!r}: it may hold only letters, digits and -._~"
        )
    counts = Counter((s.interface, s.step) for s in spec.steps)
    repeated = sorted(f"{i}.{s}" for (i, s), n in counts.items() if n > 1)
    if repeated:
        raise bad_request(
            f"Duplicate steps in runbook {spec.name}: {', '.join(repeated)}. "
            "A runbook may list each interface's step once."
        )


def _owned_as_created(spec: RunbookSpec, creator: Creator) -> RunbookSpec:
    """A project's runbook is its own and never public; the deployment's is as asked."""
    if creator.system:
        return spec
    if spec.owner is not None and spec.owner != creator.project:
        raise bad_request(
            "Cannot create a runbook as a project scoped admin with an owner other "
            "than your own project."
        )
    if creator.project is not None and spec.public:
        raise bad_request("Cannot create a public runbook as a project scoped admin.")
    return dataclasses.replace(spec, owner=creator.project)


def _rows(steps: Sequence[StepSpec]) -> list[RunbookStep]:
    return [
        RunbookStep(interface=s.interface, step=s.step, args=s.args, order=s.order) for s in steps
    ]


def _name_taken(name: str) -> RequestError:
    return conflict(f"A runbook with name {name} already exists.")


def _refuse_taken(session: Session, name: str, runbook_uuid: str | None = None) -> None:
    if session.scalar(select(Runbook.id).where(Runbook.name == name)):
        raise _name_taken(name)
    if runbook_uuid and session.scalar(select(Runbook.id).where(Runbook.uuid == runbook_uuid)):
        raise conflict(f"A runbook with UUID {runbook_uuid} already exists.")


# -- writes -----------------------------------------------------------------


def create_runbook(svc: Services, spec: RunbookSpec, version: Version, creator: Creator) -> Runbook:
    """Store a new runbook: 400 for a rule broken, 409 for a name or UUID in use."""
    check_spec(spec, trait_name=version < TRAITS_SINCE)
    spec = _owned_as_created(spec, creator)
    runbook_uuid = lookup.check_uuid(spec.uuid) if spec.uuid else str(uuidlib.uuid4())
    try:
        with svc.db.write() as session:
            _refuse_taken(session, spec.name, runbook_uuid)
            runbook = Runbook(
                uuid=runbook_uuid,
                name=spec.name,
                description=spec.description,
                owner=spec.owner,
                public=spec.public,
                disable_ramdisk=spec.disable_ramdisk,
                extra=spec.extra,
                steps=_rows(spec.steps),
                traits=[],
            )
            session.add(runbook)
            session.flush()
    except IntegrityError:  # a concurrent create won the race for the name or UUID
        raise _name_taken(spec.name) from None
    return runbook


def rules_for(ops: Sequence[Operation]) -> list[str]:
    """The rules a patch needs: ``update:owner`` and ``update:public`` for those fields,
    ``update`` for anything else (and for an empty patch)."""
    rules: list[str] = []
    generic = False
    for op in ops:
        if op.root == "owner":
            rules.append(UPDATE_OWNER)
        elif op.root == "public":
            rules.append(UPDATE_PUBLIC)
        else:
            generic = True
    if generic or not rules:
        rules.append(UPDATE)
    return list(dict.fromkeys(rules))


def patch_runbook(
    svc: Services, ident: str, version: Version, ops: Sequence[Operation], caller: Caller
) -> Runbook:
    """Apply the JSON patch ``ops`` to the stored runbook and store the result, checked whole.

    The caller needs every rule ``rules_for`` names on the runbook's owner.
    Setting ``public`` clears the owner; a public runbook cannot be given an
    owner unless the same patch makes it private.
    """
    PATCH.check(ops, version)
    try:
        with svc.db.write() as session:
            runbook = find_runbook(session, ident)
            for rule in rules_for(ops):
                caller.require(rule, RunbookTarget(runbook.owner))
            before = spec_of(runbook)
            after = _patched(before, ops)
            check_spec(after, trait_name=False)
            if after.name != runbook.name:
                _refuse_taken(session, after.name)
            _store(runbook, before, after)
            session.flush()
            session.refresh(runbook)
    except IntegrityError:
        raise conflict("A runbook with that name already exists.") from None
    return runbook


def _patched(before: RunbookSpec, ops: Sequence[Operation]) -> RunbookSpec:
    owners = [op for op in ops if op.root == "owner" and op.op != "remove"]
    publics = [op for op in ops if op.root == "public"]
    made_public = bool(publics) and bool(publics[0].value)
    if owners and ((before.public and not publics) or made_public):
        raise bad_request("There cannot be an owner for a public runbook")
    document: dict[str, Any] = {
        "name": before.name,
        "steps": [dataclasses.asdict(s) for s in before.steps],
        "extra": before.extra,
        "owner": None if publics else before.owner,
        "public": before.public,
        "disable_ramdisk": before.disable_ramdisk,
        "description": before.description,
    }
    after = apply(document, ops)
    if after.get("extra") is None:
        after["extra"] = {}
    body = checked(RunbookCreate, after, "runbook")
    return spec_from(body)


def _store(runbook: Runbook, before: RunbookSpec, after: RunbookSpec) -> None:
    runbook.name = after.name
    runbook.extra = after.extra
    runbook.description = after.description
    runbook.owner = after.owner
    runbook.public = after.public
    runbook.disable_ramdisk = after.disable_ramdisk
    if after.steps != before.steps:
        runbook.steps = _rows(after.steps)
    runbook.updated_at = utcnow()


def delete_runbook(svc: Services, ident: str) -> None:
    with svc.db.write() as session:
        session.delete(find_runbook(session, ident))


def set_traits(svc: Services, ident: str, traits: Sequence[str]) -> None:
    """Replace the runbook's traits (duplicates count once)."""
    wanted = sorted({values.check_trait(t) for t in traits})
    with svc.db.write() as session:
        runbook = find_runbook(session, ident)
        runbook.traits = [RunbookTrait(trait=t) for t in wanted]
        runbook.updated_at = utcnow()


def add_trait(svc: Services, ident: str, trait: str) -> str:
    """Add one trait (already there: nothing changes); returns the runbook's UUID."""
    values.check_trait(trait)
    with svc.db.write() as session:
        runbook = find_runbook(session, ident)
        if trait not in trait_names(runbook):
            runbook.traits.append(RunbookTrait(trait=trait))
            runbook.updated_at = utcnow()
        return runbook.uuid


def remove_traits(svc: Services, ident: str, trait: str | None) -> None:
    """Remove one trait (not there: nothing changes), or all of them."""
    with svc.db.write() as session:
        runbook = find_runbook(session, ident)
        kept = [t for t in runbook.traits if trait is not None and t.trait != trait]
        if len(kept) != len(runbook.traits):
            runbook.traits = kept
            runbook.updated_at = utcnow()


# -- use --------------------------------------------------------------------


@dataclass(frozen=True)
class Expansion:
    """What a runbook puts into a provision request."""

    steps: tuple[dict[str, Any], ...]
    disable_ramdisk: bool


def expand(
    session: Session,
    ident: str,
    node: Node,
    version: Version,
    caller: Caller,
) -> Expansion:
    """The steps (in ``order``) of runbook ``ident`` for ``node``, once the caller may use
    it (403) and the node is approved for it by a trait (400)."""
    if version < SINCE:
        raise not_acceptable(f"Runbooks are not available at API version {fmt(version)}")
    runbook = find_runbook(session, ident)
    caller.require(USE, RunbookTarget(runbook.owner))
    node_traits = set(lookup.node_traits(session.connection(), node.id))
    if version >= TRAITS_SINCE:
        approved = set(trait_names(runbook))
        if not approved:
            raise bad_request(
                f"Runbook {runbook.uuid} has no traits configured. Please ask an "
                "administrator to add traits to the runbook."
            )
        if not approved & node_traits:
            raise bad_request(
                f"This runbook has not been approved for use on this node {node.uuid}. The "
                f"node does not have any of the runbook's traits {sorted(approved)}. Please "
                "ask an administrator to add a matching trait to your node."
            )
    elif runbook.name not in node_traits:
        raise bad_request(
            f"This runbook has not been approved for use on this node {node.uuid}. Please "
            "ask an administrator to add it to your node traits."
        )
    ordered = sorted(runbook.steps, key=lambda s: s.order)  # stable: ties as listed
    steps = tuple(
        {"interface": s.interface, "step": s.step, "args": copy.deepcopy(s.args), "order": s.order}
        for s in ordered
    )
    return Expansion(steps, runbook.disable_ramdisk)
