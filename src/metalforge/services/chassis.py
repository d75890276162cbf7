"""Chassis: groups of nodes an operator names, and the nodes' references to them.

A node names its chassis by UUID (``nodes.chassis_uuid``). The reference is
kept true here rather than by a foreign key (see ``db.models.Chassis``):
every write that gives a node a chassis reads the chassis under its row lock
(``claim_for_node``), and a deletion takes the same lock before it counts
the chassis' nodes. On PostgreSQL the two therefore take turns, and the
deletion, reading after the lock, sees a node committed meanwhile; on SQLite
writes take turns anyway.

Callers hand in parsed values, and a PATCH as its operations: the service
checks them against ``PATCH``, applies them and checks the result as a
create's body (``bodies.ChassisCreate``). The API owns the request bodies'
syntax and the views, and renders the detached ``Chassis`` these functions
return.
"""

from __future__ import annotations

import copy
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from metalforge.db.models import Chassis, Node, utcnow
from metalforge.errors import RequestError, bad_request, conflict, not_found
from metalforge.services import lookup
from metalforge.services.bodies import ChassisCreate, checked
from metalforge.services.context import Services
from metalforge.services.microversion import Version
from metalforge.services.patching import Operation, Patchable, PatchPolicy, apply

MAX_DESCRIPTION = 255
"""Ironic's limit on a chassis' description (and the column's)."""
PATCH = PatchPolicy({"description": Patchable(), "extra": Patchable()})
"""What a JSON patch may change: the UUID names the chassis."""


@dataclass(frozen=True)
class ChassisSpec:
    """What a chassis should be: a create's body, or a stored chassis after a patch."""

    description: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    uuid: str | None = None
    """Only for a create: the UUID the client asked for; a new one otherwise."""


def not_found_error(ident: str) -> RequestError:
    return not_found(f"Chassis {ident} could not be found.")


def find_chassis(session: Session, ident: str, *, for_update: bool = False) -> Chassis:
    """By UUID (a chassis has no name); 404 otherwise, 400 for what is not a UUID."""
    if not lookup.is_uuid(ident):
        raise bad_request(f"Expected UUID for chassis_uuid: {ident}")
    stmt = select(Chassis).where(Chassis.uuid == str(uuidlib.UUID(ident)))
    if for_update:
        stmt = stmt.with_for_update()
    chassis = session.scalar(stmt)
    if chassis is None:
        raise not_found_error(ident)
    return chassis


def claim_for_node(session: Session, chassis_uuid: str) -> None:
    """Check, under its row lock, that a node may name this chassis: 400 if it is missing.

    Called in the transaction that writes the node, so a concurrent deletion
    of the chassis waits for it (and then finds the node) or wins first (and
    this answers 400).
    """
    try:
        find_chassis(session, chassis_uuid, for_update=True)
    except RequestError as exc:
        raise bad_request(exc.message) from None


def _check(spec: ChassisSpec) -> None:
    if spec.description is not None and len(spec.description) > MAX_DESCRIPTION:
        raise bad_request(
            f"Invalid value for description: at most {MAX_DESCRIPTION} characters are allowed"
        )


def spec_of(chassis: Chassis) -> ChassisSpec:
    """``chassis`` as stored (a deep copy: what a patch changes is not the loaded row)."""
    return copy.deepcopy(ChassisSpec(chassis.description, chassis.extra, chassis.uuid))


def create_chassis(svc: Services, spec: ChassisSpec) -> Chassis:
    _check(spec)
    chassis_uuid = lookup.check_uuid(spec.uuid) if spec.uuid else str(uuidlib.uuid4())
    try:
        with svc.db.write() as session:
            chassis = Chassis(uuid=chassis_uuid, description=spec.description, extra=spec.extra)
            session.add(chassis)
            session.flush()
            session.refresh(chassis)
    except IntegrityError:
        raise conflict(f"Chassis {chassis_uuid} already exists.") from None
    return chassis


def patch_chassis(svc: Services, ident: str, version: Version, ops: Sequence[Operation]) -> Chassis:
    """Apply the JSON patch ``ops`` (checked against ``PATCH`` before the chassis is read)
    under the chassis' row lock, the result checked as a create's body; the UUID never
    changes."""
    PATCH.check(ops, version)
    with svc.db.write() as session:
        chassis = find_chassis(session, ident, for_update=True)
        before = spec_of(chassis)
        after = _patched(before, ops)
        _check(after)
        if (after.description, after.extra) != (before.description, before.extra):
            session.execute(
                update(Chassis)
                .where(Chassis.id == chassis.id)
                .values(description=after.description, extra=after.extra, updated_at=utcnow())
            )
            session.flush()
            session.refresh(chassis)
    return chassis


def _patched(before: ChassisSpec, ops: Sequence[Operation]) -> ChassisSpec:
    """``before`` with ``ops`` applied, parsed as a create's body would be."""
    document = apply({"description": before.description, "extra": before.extra}, ops)
    body = checked(ChassisCreate, document, "chassis")
    return ChassisSpec(body.description, body.extra or {}, before.uuid)


def delete_chassis(svc: Services, ident: str) -> None:
    """Delete an empty chassis; 400 while any node names it (as Ironic)."""
    with svc.db.write() as session:
        chassis = find_chassis(session, ident, for_update=True)
        if session.scalar(select(exists().where(Node.chassis_uuid == chassis.uuid))):
            raise bad_request(
                f"Cannot complete the requested action because chassis {chassis.uuid} "
                "contains nodes."
            )
        session.delete(chassis)
