"""The power-on turn an inspection waits for.

Revision ID: 0025
Revises: 0024

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import UTCDateTime

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("introspections", schema=None) as batch_op:
        batch_op.add_column(sa.Column("power_on_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("introspections", schema=None) as batch_op:
        batch_op.drop_column("power_on_at")
