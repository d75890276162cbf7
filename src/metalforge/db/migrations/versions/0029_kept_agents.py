"""Kept agents: when a flow left the ramdisk agent running for the next one (fast track).

Revision ID: 0029
Revises: 0028

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import UTCDateTime

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_sessions") as batch:
        batch.add_column(sa.Column("kept_since", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_sessions") as batch:
        batch.drop_column("kept_since")
