"""Provisional deploy plans: the step after which the agent's deploy steps complete them.

Revision ID: 0031
Revises: 0030

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("flow_progress") as batch:
        batch.add_column(sa.Column("completes_after", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("flow_progress") as batch:
        batch.drop_column("completes_after")
