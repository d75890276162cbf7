"""Conductors record which process holds their hostname.

Revision ID: 0007
Revises: 0006

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("conductors", schema=None) as batch_op:
        batch_op.add_column(sa.Column("run_id", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conductors", schema=None) as batch_op:
        batch_op.drop_column("run_id")
