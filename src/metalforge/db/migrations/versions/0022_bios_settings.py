"""BIOS settings: each node's attributes as its BMC reported them, with their registry rules.

Revision ID: 0022
Revises: 0021

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bios_settings",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("value", sa.Text(), nullable=True),
        sa.Column("attribute_type", sa.String(length=255), nullable=True),
        sa.Column("allowable_values", JsonType, nullable=True),
        sa.Column("lower_bound", sa.BigInteger(), nullable=True),
        sa.Column("max_length", sa.Integer(), nullable=True),
        sa.Column("min_length", sa.Integer(), nullable=True),
        sa.Column("read_only", sa.Boolean(), nullable=True),
        sa.Column("reset_required", sa.Boolean(), nullable=True),
        sa.Column("unique", sa.Boolean(), nullable=True),
        sa.Column("upper_bound", sa.BigInteger(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node_id", "name"),
    )


def downgrade() -> None:
    op.drop_table("bios_settings")
