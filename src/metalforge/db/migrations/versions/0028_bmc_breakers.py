"""BMC breakers: the BMCs a process refuses to call for a while, for ``GET /metrics``.

Revision ID: 0028
Revises: 0027

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import UTCDateTime

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bmc_breakers",
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("protocol", sa.String(length=16), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("open_until", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("address", "holder"),
    )


def downgrade() -> None:
    op.drop_table("bmc_breakers")
