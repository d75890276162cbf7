"""Introspection records and inspection data, read and written as typed values.

The record says where a node's inspection stands (``inspection_states``);
the data is what it collected. Writers call these inside their own
transaction: the conductor's under the node's reservation (fenced by the
caller), the API's when it stores a ramdisk's report with the work item
that processes it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from metalforge.db.engine import now_for
from metalforge.db.models import InspectionData, Introspection, Node


@dataclass(frozen=True)
class Record:
    """One node's introspection record."""

    node_uuid: str
    state: str
    generation: int
    manage_boot: bool = True
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    error: str | None = None
    power_on_at: dt.datetime | None = None
    """The throttle's turn this inspection powers the node on at (it waits, unlocked)."""

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def moved(self, state: str, **changes: Any) -> Record:
        return replace(self, state=state, **changes)


def _record(row: Introspection) -> Record:
    return Record(
        node_uuid=row.node_uuid,
        state=row.state,
        generation=row.generation,
        manage_boot=row.manage_boot,
        started_at=row.started_at,
        finished_at=row.finished_at,
        error=row.error,
        power_on_at=row.power_on_at,
    )


def load(session: Session, node_uuid: str) -> Record | None:
    row = session.get(Introspection, node_uuid)
    return None if row is None else _record(row)


def save(session: Session, record: Record) -> None:
    """Write ``record`` whole (insert or replace)."""
    row = session.get(Introspection, record.node_uuid)
    values = {
        "state": record.state,
        "generation": record.generation,
        "manage_boot": record.manage_boot,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "error": record.error,
        "power_on_at": record.power_on_at,
        "updated_at": now_for(session),
    }
    if row is None:
        session.add(Introspection(node_uuid=record.node_uuid, **values))
    else:
        for key, value in values.items():
            setattr(row, key, value)
    session.flush()


def page(
    session: Session,
    *,
    limit: int,
    marker: Record | None = None,
    states: list[str] | None = None,
) -> list[Record]:
    """Records newest first (by start, then UUID), as ironic-inspector lists them."""
    query = select(Introspection)
    if states:
        query = query.where(Introspection.state.in_(states))
    if marker is not None and marker.started_at is not None:
        query = query.where(
            (Introspection.started_at < marker.started_at)
            | (
                (Introspection.started_at == marker.started_at)
                & (Introspection.node_uuid < marker.node_uuid)
            )
        )
    query = query.order_by(Introspection.started_at.desc(), Introspection.node_uuid.desc())
    return [_record(row) for row in session.scalars(query.limit(limit))]


def waiting_since(session: Session, states: list[str], cutoff: dt.datetime) -> list[Record]:
    """Records in ``states`` whose inspection started before ``cutoff`` (the timeout sweep)."""
    query = select(Introspection).where(
        Introspection.state.in_(states), Introspection.started_at < cutoff
    )
    return [_record(row) for row in session.scalars(query.order_by(Introspection.started_at))]


def forget_deleted_nodes(session: Session) -> int:
    """Remove the records and data of nodes that no longer exist; returns how many records."""
    gone = ~select(Node.id).where(Node.uuid == Introspection.node_uuid).exists()
    records = session.execute(delete(Introspection).where(gone))
    data_gone = ~select(Node.id).where(Node.uuid == InspectionData.node_uuid).exists()
    session.execute(delete(InspectionData).where(data_gone))
    return int(records.rowcount)  # type: ignore[attr-defined]


def expire_raw_data(session: Session, older_than: dt.datetime) -> int:
    """Drop raw ramdisk reports received before ``older_than``; the inventory stays."""
    result = session.execute(
        update(InspectionData)
        .where(InspectionData.raw_received_at < older_than)
        .values(raw=None, raw_received_at=None, raw_folded=None)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


# -- data ------------------------------------------------------------------
DERIVED_KEYS = frozenset(
    {"all_interfaces", "valid_interfaces", "macs", "root_disk", "local_gb", "boot_interface"}
)
"""The keys processing adds to a report's plugin data; the rest of it is the report's own."""


def folded_keys(report: dict[str, Any], plugin_data: dict[str, Any]) -> list[str] | None:
    """The derived keys ``report`` carried, if it can be rebuilt from what processing it
    stores (``plugin_data``); None if processing wrote over one of them with another value
    (the ramdisk's guess of the root disk, where root device hints chose another)."""
    carried = sorted(report.keys() & DERIVED_KEYS)
    if any(plugin_data.get(key) != report[key] for key in carried):
        return None
    return carried


@dataclass(frozen=True)
class Data:
    """What inspection collected for one node."""

    inventory: dict[str, Any] | None
    plugin_data: dict[str, Any] | None
    raw: dict[str, Any] | None


def load_data(session: Session, node_uuid: str) -> Data | None:
    row = session.get(InspectionData, node_uuid)
    if row is None:
        return None
    raw = row.raw
    if raw is None and row.raw_folded is not None and row.inventory is not None:
        # Folded (``store_processed``): the report is the processed data less what
        # processing derived (unless the report carried it too).
        carried = set(row.raw_folded)
        own = {
            k: v
            for k, v in (row.plugin_data or {}).items()
            if k not in DERIVED_KEYS or k in carried
        }
        raw = {**own, "inventory": row.inventory}
    return Data(inventory=row.inventory, plugin_data=row.plugin_data, raw=raw)


def _data_row(session: Session, node_uuid: str) -> InspectionData:
    row = session.get(InspectionData, node_uuid)
    if row is None:
        row = InspectionData(node_uuid=node_uuid)
        session.add(row)
    return row


def store_raw(session: Session, node_uuid: str, report: dict[str, Any]) -> None:
    """Keep the ramdisk's report as received (the caller dropped its logs)."""
    row = _data_row(session, node_uuid)
    row.raw = report
    row.raw_received_at = now_for(session)
    row.raw_folded = None
    session.flush()


def store_processed(
    session: Session,
    node_uuid: str,
    inventory: dict[str, Any],
    plugin_data: dict[str, Any],
    *,
    report: dict[str, Any],
) -> None:
    """Keep what processing ``report`` (the stored one) made of it.

    The report is not kept a second time when it can be rebuilt from this
    (``folded_keys``): until it expires, ``load_data`` rebuilds it, so each
    report is stored once.
    """
    row = _data_row(session, node_uuid)
    row.inventory = inventory
    row.plugin_data = plugin_data
    row.processed_at = now_for(session)
    own = {k: v for k, v in plugin_data.items() if k not in DERIVED_KEYS}
    rest = {k: v for k, v in report.items() if k not in DERIVED_KEYS and k != "inventory"}
    if row.raw == report and report.get("inventory") == inventory and own == rest:
        carried = folded_keys(report, plugin_data)
        if carried is not None:
            row.raw, row.raw_folded = None, carried
    session.flush()
