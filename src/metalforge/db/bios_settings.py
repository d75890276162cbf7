"""A node's BIOS settings, read and written as typed values.

The BIOS interface reads them from the BMC (after it changes them, and when
asked to refresh them); the conductor stores what it read under the node's
reservation, replacing what was stored before; the API reads them.
Attributes that kept their value keep their row (and ``updated_at``), so the
table says when each one last changed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, fields

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from metalforge.db.models import BiosSetting, utcnow


@dataclass(frozen=True)
class Setting:
    """One BIOS attribute: its value as text, and the registry's rules for it if known."""

    name: str
    value: str | None
    attribute_type: str | None = None
    allowable_values: tuple[str, ...] | None = None
    lower_bound: int | None = None
    max_length: int | None = None
    min_length: int | None = None
    read_only: bool | None = None
    reset_required: bool | None = None
    unique: bool | None = None
    upper_bound: int | None = None


@dataclass(frozen=True)
class Stored:
    """A stored setting, with when it was first seen and last changed."""

    setting: Setting
    created_at: dt.datetime
    updated_at: dt.datetime | None


_COLUMNS = tuple(f.name for f in fields(Setting) if f.name != "name")


def _values(setting: Setting) -> dict[str, object]:
    values: dict[str, object] = {name: getattr(setting, name) for name in _COLUMNS}
    if setting.allowable_values is not None:
        values["allowable_values"] = list(setting.allowable_values)
    return values


def _setting(row: BiosSetting) -> Setting:
    allowed = row.allowable_values
    return Setting(
        name=row.name,
        value=row.value,
        attribute_type=row.attribute_type,
        allowable_values=tuple(allowed) if allowed is not None else None,
        lower_bound=row.lower_bound,
        max_length=row.max_length,
        min_length=row.min_length,
        read_only=row.read_only,
        reset_required=row.reset_required,
        unique=row.unique,
        upper_bound=row.upper_bound,
    )


def store(session: Session, node_id: int, settings: Sequence[Setting]) -> None:
    """Make ``settings`` the node's: new ones added, changed ones updated, gone ones removed."""
    wanted = {s.name: s for s in settings}
    rows = {
        r.name: r
        for r in session.scalars(select(BiosSetting).where(BiosSetting.node_id == node_id))
    }
    gone = [name for name in rows if name not in wanted]
    if gone:
        session.execute(
            delete(BiosSetting).where(BiosSetting.node_id == node_id, BiosSetting.name.in_(gone))
        )
    for name, setting in wanted.items():
        row = rows.get(name)
        values = _values(setting)
        if row is None:
            session.add(BiosSetting(node_id=node_id, name=name, **values))
        elif _setting(row) != setting:
            for column, value in values.items():
                setattr(row, column, value)
            row.updated_at = utcnow()
    session.flush()


def listed(session: Session, node_id: int) -> list[Stored]:
    """The node's settings by name."""
    rows = session.scalars(
        select(BiosSetting).where(BiosSetting.node_id == node_id).order_by(BiosSetting.name)
    )
    return [Stored(_setting(r), r.created_at, r.updated_at) for r in rows]


def found(session: Session, node_id: int, name: str) -> Stored | None:
    row = session.get(BiosSetting, (node_id, name))
    return None if row is None else Stored(_setting(row), row.created_at, row.updated_at)
