"""Ports: ``available_for_dynamic_portgroup`` (Ironic 1.111), true for existing ports.

Revision ID: 0016
Revises: 0015

Added in place (SQLite's ADD COLUMN with a constant default), as Ironic adds it.

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "ports",
        sa.Column(
            "available_for_dynamic_portgroup",
            sa.Boolean(),
            nullable=False,
            server_default=sa.true(),
        ),
    )


def downgrade() -> None:
    op.drop_column("ports", "available_for_dynamic_portgroup")
