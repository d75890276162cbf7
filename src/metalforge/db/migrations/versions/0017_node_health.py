"""Nodes: ``health`` (Ironic 1.109), as the BMC last rated the hardware.

Revision ID: 0017
Revises: 0016

Added in place (SQLite's ADD COLUMN): the nodes table and its event
triggers stay as they are.

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("health", sa.String(length=16), nullable=True))


def downgrade() -> None:
    op.drop_column("nodes", "health")
