"""The PXE filter: its hosts' status, and (PostgreSQL) notifications of what it filters on.

Revision ID: 0011
Revises: 0010

A filter host must learn within a second that a node entered or left
inspection, or that a port appeared, moved or went. On PostgreSQL, triggers
on exactly those writes send a NOTIFY, which PostgreSQL delivers only when
the writing transaction commits, whichever process (or operator's psql)
wrote. SQLite has no notifications: there the process that writes tells its
own filter (``db.changes``).

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

CHANNEL = "metalforge_pxe_filter"
"""Kept equal to ``db.changes.CHANNEL`` (a migration never imports code that may change)."""

_TRIGGERS = (
    ("ports", "INSERT OR UPDATE OF address, node_id OR DELETE"),
    ("introspections", "INSERT OR UPDATE OF state OR DELETE"),
    ("nodes", "DELETE"),
)


def upgrade() -> None:
    op.create_table(
        "pxe_filter_hosts",
        sa.Column("hostname", sa.String(length=255), primary_key=True),
        sa.Column("driver", sa.String(length=16), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("allowed", sa.Integer(), nullable=False),
        sa.Column("denied", sa.Integer(), nullable=False),
        sa.Column("unknown_allowed", sa.Boolean(), nullable=False),
        sa.Column("synced_at", UTCDateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE FUNCTION metalforge_pxe_filter_changed() RETURNS trigger "
        "LANGUAGE plpgsql AS $$ BEGIN "
        f"PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$"
    )
    for table, events in _TRIGGERS:
        op.execute(
            f"CREATE TRIGGER metalforge_pxe_filter_{table} AFTER {events} ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION metalforge_pxe_filter_changed()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, _events in _TRIGGERS:
            op.execute(f"DROP TRIGGER metalforge_pxe_filter_{table} ON {table}")
        op.execute("DROP FUNCTION metalforge_pxe_filter_changed()")
    op.drop_table("pxe_filter_hosts")
