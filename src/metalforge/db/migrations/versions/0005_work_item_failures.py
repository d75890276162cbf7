"""Work items count their failed attempts, so a poisoned item is dead-lettered.

Revision ID: 0005
Revises: 0004

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("work_items", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("work_items", schema=None) as batch_op:
        batch_op.drop_column("failures")
