"""Chassis: named groups of nodes.

Revision ID: 0013
Revises: 0012

Nodes keep referring to their chassis by UUID (``nodes.chassis_uuid``, now
indexed); no foreign key is added, because adding one would rebuild the
nodes table on SQLite and drop its event triggers. Earlier versions stored
any UUID a client gave there: each UUID nodes already name becomes a
chassis, so every reference is true from this revision on.

"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    chassis = op.create_table(
        "chassis",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(length=36), nullable=False, unique=True),
        sa.Column("description", sa.String(length=255), nullable=True),
        sa.Column("extra", JsonType, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_nodes_chassis_uuid", "nodes", ["chassis_uuid"])
    named = op.get_bind().execute(
        sa.text("SELECT DISTINCT chassis_uuid FROM nodes WHERE chassis_uuid IS NOT NULL")
    )
    now = dt.datetime.now(dt.UTC)
    rows = [
        {"uuid": value, "description": None, "extra": {}, "created_at": now} for (value,) in named
    ]
    if rows:
        op.bulk_insert(chassis, rows)


def downgrade() -> None:
    op.drop_index("ix_nodes_chassis_uuid", table_name="nodes")
    op.drop_table("chassis")
