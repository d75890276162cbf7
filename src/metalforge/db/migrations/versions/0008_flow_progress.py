"""Flow progress moves out of ``driver_internal_info`` into its own table.

A node in the middle of a flow keeps its place: the plan, the step index,
the requested steps, the ramdisk flags and the step timestamps are carried
into ``flow_progress`` and removed from ``driver_internal_info`` (the
drivers' own keys stay). Downgrading puts them back.

Revision ID: 0008
Revises: 0007

"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_KINDS = ("clean", "deploy", "service")
_STATE_FLOW = {
    "cleaning": "clean",
    "clean wait": "clean",
    "clean failed": "clean",
    "clean hold": "clean",
    "deploying": "deploy",
    "wait call-back": "deploy",
    "deploy failed": "deploy",
    "deploy hold": "deploy",
    "servicing": "service",
    "service wait": "service",
    "service failed": "service",
    "service hold": "service",
}
"""The flow a node's progress belongs to, when its state says."""
_RAMDISK_KEYS = ("clean_prepared", "clean_preparing_since", "clean_disable_ramdisk")
_STEP_TIME_KEYS = ("step_started_at", "step_heartbeat_at")


def _moved_keys(kind: str) -> tuple[str, ...]:
    return (f"{kind}_steps", f"{kind}_step_index", f"requested_{kind}_steps")


_ALL_MOVED = {key for kind in _KINDS for key in _moved_keys(kind)} | {
    *_RAMDISK_KEYS,
    *_STEP_TIME_KEYS,
}

_nodes = sa.table(
    "nodes",
    sa.column("id", sa.Integer()),
    sa.column("provision_state", sa.String()),
    sa.column("driver_internal_info", JsonType),
)


def _progress_table() -> sa.TableClause:
    return sa.table(
        "flow_progress",
        sa.column("node_id", sa.Integer()),
        sa.column("flow", sa.String()),
        sa.column("planned", sa.Boolean()),
        sa.column("plan", JsonType),
        sa.column("step_index", sa.Integer()),
        sa.column("requested", JsonType),
        sa.column("ramdisk_prepared", sa.Boolean()),
        sa.column("ramdisk_booting_since", sa.Float()),
        sa.column("without_ramdisk", sa.Boolean()),
        sa.column("step_started_at", sa.Float()),
        sa.column("step_heartbeat_at", sa.Float()),
    )


def _flow_of(state: str | None, info: dict[str, Any]) -> str | None:
    by_state = _STATE_FLOW.get(state or "")
    if by_state is not None and any(key in info for key in _moved_keys(by_state)):
        return by_state
    for kind in _KINDS:
        if any(key in info for key in _moved_keys(kind)):
            return kind
    if any(key in info for key in _RAMDISK_KEYS):
        return "clean"
    return by_state


def _as_float(value: Any) -> float | None:
    return None if value is None else float(value)


def progress_of(state: str | None, info: dict[str, Any]) -> dict[str, Any] | None:
    """The ``flow_progress`` row for a node's old ``driver_internal_info``, if it has any."""
    if not any(key in info for key in _ALL_MOVED):
        return None
    flow = _flow_of(state, info)
    plan = info.get(f"{flow}_steps")
    return {
        "flow": flow,
        "planned": plan is not None,
        "plan": list(plan or []),
        "step_index": int(info.get(f"{flow}_step_index", 0) or 0),
        "requested": list(info.get(f"requested_{flow}_steps") or []),
        "ramdisk_prepared": bool(info.get("clean_prepared")),
        "ramdisk_booting_since": _as_float(info.get("clean_preparing_since")),
        "without_ramdisk": bool(info.get("clean_disable_ramdisk")),
        "step_started_at": _as_float(info.get("step_started_at")),
        "step_heartbeat_at": _as_float(info.get("step_heartbeat_at")),
    }


def info_of(progress: Any) -> dict[str, Any]:
    """The ``driver_internal_info`` keys a ``flow_progress`` row stood for (downgrade)."""
    keys: dict[str, Any] = {}
    flow = progress.flow
    if flow is not None:
        if progress.planned:
            keys[f"{flow}_steps"] = progress.plan
            keys[f"{flow}_step_index"] = progress.step_index
        if progress.requested:
            keys[f"requested_{flow}_steps"] = progress.requested
    optional = {
        "clean_prepared": progress.ramdisk_prepared or None,
        "clean_preparing_since": progress.ramdisk_booting_since,
        "clean_disable_ramdisk": progress.without_ramdisk or None,
        "step_started_at": progress.step_started_at,
        "step_heartbeat_at": progress.step_heartbeat_at,
    }
    keys.update({key: value for key, value in optional.items() if value is not None})
    return keys


def upgrade() -> None:
    op.create_table(
        "flow_progress",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("flow", sa.String(length=16), nullable=True),
        sa.Column("planned", sa.Boolean(), nullable=False),
        sa.Column("plan", JsonType, nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("requested", JsonType, nullable=False),
        sa.Column("ramdisk_prepared", sa.Boolean(), nullable=False),
        sa.Column("ramdisk_booting_since", sa.Float(), nullable=True),
        sa.Column("without_ramdisk", sa.Boolean(), nullable=False),
        sa.Column("step_started_at", sa.Float(), nullable=True),
        sa.Column("step_heartbeat_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node_id"),
    )
    connection = op.get_bind()
    progress = _progress_table()
    rows = connection.execute(
        sa.select(_nodes.c.id, _nodes.c.provision_state, _nodes.c.driver_internal_info)
    ).all()
    for node_id, state, info in rows:
        values = progress_of(state, dict(info or {}))
        if values is None:
            continue
        connection.execute(sa.insert(progress).values(node_id=node_id, **values))
        kept = {key: value for key, value in info.items() if key not in _ALL_MOVED}
        connection.execute(
            sa.update(_nodes).where(_nodes.c.id == node_id).values(driver_internal_info=kept)
        )


def downgrade() -> None:
    connection = op.get_bind()
    progress = _progress_table()
    for row in connection.execute(sa.select(progress)).all():
        info = connection.scalar(
            sa.select(_nodes.c.driver_internal_info).where(_nodes.c.id == row.node_id)
        )
        restored = {**(info or {}), **info_of(row)}
        connection.execute(
            sa.update(_nodes)
            .where(_nodes.c.id == row.node_id)
            .values(driver_internal_info=restored)
        )
    op.drop_table("flow_progress")
