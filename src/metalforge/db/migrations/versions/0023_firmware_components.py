"""Firmware components: each node's firmware versions, first seen, current and flashed.

Revision ID: 0023
Revises: 0022

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import UTCDateTime

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "firmware_components",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("component", sa.String(length=255), nullable=False),
        sa.Column("initial_version", sa.String(length=255), nullable=False),
        sa.Column("current_version", sa.String(length=255), nullable=True),
        sa.Column("last_version_flashed", sa.String(length=255), nullable=True),
        sa.Column("vendor", sa.String(length=255), nullable=True),
        sa.Column("model", sa.String(length=255), nullable=True),
        sa.Column("serial_number", sa.String(length=255), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node_id", "component"),
    )


def downgrade() -> None:
    op.drop_table("firmware_components")
