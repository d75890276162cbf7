"""Introspection records, the data inspection collects, cluster-wide throttles.

Revision ID: 0009
Revises: 0008

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "introspections",
        sa.Column("node_uuid", sa.String(length=36), primary_key=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("manage_boot", sa.Boolean(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_introspections_state", "introspections", ["state"])
    op.create_table(
        "inspection_data",
        sa.Column("node_uuid", sa.String(length=36), primary_key=True),
        sa.Column("inventory", JsonType, nullable=True),
        sa.Column("plugin_data", JsonType, nullable=True),
        sa.Column("processed_at", UTCDateTime(), nullable=True),
        sa.Column("raw", JsonType, nullable=True),
        sa.Column("raw_received_at", UTCDateTime(), nullable=True),
    )
    op.create_index("ix_inspection_data_raw_received_at", "inspection_data", ["raw_received_at"])
    op.create_table(
        "throttles",
        sa.Column("name", sa.String(length=64), primary_key=True),
        sa.Column("next_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("throttles")
    op.drop_index("ix_inspection_data_raw_received_at", table_name="inspection_data")
    op.drop_table("inspection_data")
    op.drop_index("ix_introspections_state", table_name="introspections")
    op.drop_table("introspections")
