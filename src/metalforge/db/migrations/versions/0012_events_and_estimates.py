"""Node events for the live stream, step run times for estimates, cluster metric totals.

Revision ID: 0012
Revises: 0011

Every committed write of a field an operator watches adds a ``node_events``
row, written by triggers in the writing transaction (both engines), so the
stream misses no change whoever made it. On PostgreSQL the trigger also
sends a NOTIFY, delivered at commit, to wake every API process's reader;
on SQLite the writing process wakes its own (``db.events``), and a short
poll covers other processes.

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

CHANNEL = "metalforge_node_events"
"""Kept equal to ``db.events.CHANNEL`` (a migration never imports code that may change)."""

WATCHED = (
    "name",
    "driver",
    "provision_state",
    "target_provision_state",
    "power_state",
    "target_power_state",
    "maintenance",
    "maintenance_reason",
    "fault",
    "last_error",
    "clean_step",
    "deploy_step",
    "service_step",
    "conductor_group",
    "resource_class",
    "owner",
    "lessee",
    "instance_uuid",
)
"""The node fields whose change is an event (not the reservation, epoch or timestamps)."""

_PG_EPOCH = "extract(epoch from clock_timestamp())"
_SQLITE_EPOCH = "((julianday('now') - 2440587.5) * 86400.0)"


def upgrade() -> None:
    op.create_table(
        "step_runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("hardware_type", sa.String(length=255), nullable=False),
        sa.Column("interface", sa.String(length=64), nullable=False),
        sa.Column("step", sa.String(length=255), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=False),
    )
    op.create_index("ix_step_runs_key", "step_runs", ["hardware_type", "interface", "step", "id"])
    op.create_table(
        "node_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("node_uuid", sa.String(length=36), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sqlite_autoincrement=True,  # ids are never handed out again once pruned
    )
    op.create_index("ix_node_events_at", "node_events", ["at"])
    op.create_table(
        "metric_totals",
        sa.Column("name", sa.String(length=128), primary_key=True),
        sa.Column("labels", sa.String(length=512), primary_key=True),
        sa.Column("part", sa.String(length=32), primary_key=True),
        sa.Column("value", sa.Float(), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_triggers()
    else:
        _sqlite_triggers()


def _postgresql_triggers() -> None:
    changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in WATCHED)
    op.execute(
        "CREATE FUNCTION metalforge_node_event() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN "
        "IF TG_OP = 'DELETE' THEN "
        f"INSERT INTO node_events (node_uuid, deleted, at) VALUES (OLD.uuid, true, {_PG_EPOCH}); "
        "ELSE "
        f"INSERT INTO node_events (node_uuid, deleted, at) VALUES (NEW.uuid, false, {_PG_EPOCH}); "
        "END IF; "
        f"PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER metalforge_node_event_insert AFTER INSERT OR DELETE ON nodes "
        "FOR EACH ROW EXECUTE FUNCTION metalforge_node_event()"
    )
    op.execute(
        "CREATE TRIGGER metalforge_node_event_update AFTER UPDATE ON nodes "
        f"FOR EACH ROW WHEN ({changed}) EXECUTE FUNCTION metalforge_node_event()"
    )


def _sqlite_triggers() -> None:
    changed = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in WATCHED)
    insert = "INSERT INTO node_events (node_uuid, deleted, at) VALUES"
    op.execute(
        "CREATE TRIGGER metalforge_node_event_insert AFTER INSERT ON nodes "
        f"BEGIN {insert} (NEW.uuid, 0, {_SQLITE_EPOCH}); END"
    )
    op.execute(
        "CREATE TRIGGER metalforge_node_event_update AFTER UPDATE ON nodes "
        f"WHEN {changed} BEGIN {insert} (NEW.uuid, 0, {_SQLITE_EPOCH}); END"
    )
    op.execute(
        "CREATE TRIGGER metalforge_node_event_delete AFTER DELETE ON nodes "
        f"BEGIN {insert} (OLD.uuid, 1, {_SQLITE_EPOCH}); END"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER metalforge_node_event_insert ON nodes")
        op.execute("DROP TRIGGER metalforge_node_event_update ON nodes")
        op.execute("DROP FUNCTION metalforge_node_event()")
    else:
        for name in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER metalforge_node_event_{name}")
    op.drop_table("metric_totals")
    op.drop_table("node_events")
    op.drop_index("ix_step_runs_key", table_name="step_runs")
    op.drop_table("step_runs")
