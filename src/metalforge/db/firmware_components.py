"""A node's firmware components, read and written as typed values.

The firmware interface reports what each component runs (at verification
and after each update); the store keeps, per component, the version it was
first seen with (``initial_version``, never changed after), the one it runs
now, and the last one metalforge flashed onto it, so an operator sees what
changed since the node arrived and whether the last update took.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from metalforge.db.models import FirmwareComponent, utcnow


@dataclass(frozen=True)
class Reported:
    """What the BMC says of one component now."""

    component: str
    current_version: str | None
    vendor: str | None = None
    model: str | None = None
    serial_number: str | None = None
    flashed: bool = False
    """Set by an update that just flashed ``current_version`` onto the component."""
    before: str | None = None
    """What the component ran before that update: its initial version if none is stored."""


@dataclass(frozen=True)
class Stored:
    """One stored component, as the API shows it."""

    component: str
    initial_version: str
    current_version: str | None
    last_version_flashed: str | None
    vendor: str | None
    model: str | None
    serial_number: str | None
    created_at: dt.datetime
    updated_at: dt.datetime | None


def store(session: Session, node_id: int, reported: Sequence[Reported]) -> None:
    """Merge a report: new components start with their current version as the initial
    one; components the BMC no longer lists are dropped."""
    rows = {
        r.component: r
        for r in session.scalars(
            select(FirmwareComponent).where(FirmwareComponent.node_id == node_id)
        )
    }
    wanted = {r.component: r for r in reported}
    gone = [name for name in rows if name not in wanted]
    if gone:
        session.execute(
            delete(FirmwareComponent).where(
                FirmwareComponent.node_id == node_id, FirmwareComponent.component.in_(gone)
            )
        )
    for name, report in wanted.items():
        row = rows.get(name)
        if row is None:
            first = report.before if report.before is not None else report.current_version
            row = FirmwareComponent(node_id=node_id, component=name, initial_version=first or "")
            session.add(row)
        before = (row.current_version, row.last_version_flashed, row.vendor, row.model)
        row.current_version = report.current_version
        if report.flashed:
            row.last_version_flashed = report.current_version
        row.vendor, row.model = report.vendor, report.model
        row.serial_number = report.serial_number
        if row.created_at is not None and before != (
            row.current_version,
            row.last_version_flashed,
            row.vendor,
            row.model,
        ):
            row.updated_at = utcnow()
    session.flush()


def listed(session: Session, node_id: int) -> list[Stored]:
    rows = session.scalars(
        select(FirmwareComponent)
        .where(FirmwareComponent.node_id == node_id)
        .order_by(FirmwareComponent.component)
    )
    return [
        Stored(
            r.component,
            r.initial_version,
            r.current_version,
            r.last_version_flashed,
            r.vendor,
            r.model,
            r.serial_number,
            r.created_at,
            r.updated_at,
        )
        for r in rows
    ]
