"""Agent sessions: the ramdisk agent's token, address and heartbeats per node.

Revision ID: 0004
Revises: 0003

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_sessions",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("booted_at", UTCDateTime(), nullable=True),
        sa.Column("token", sa.String(length=128), nullable=True),
        sa.Column("token_issued_at", UTCDateTime(), nullable=True),
        sa.Column("agent_url", sa.String(length=255), nullable=True),
        sa.Column("agent_version", sa.String(length=64), nullable=True),
        sa.Column("verify_ca", sa.Text(), nullable=True),
        sa.Column("last_heartbeat_at", UTCDateTime(), nullable=True),
        sa.Column("agent_status", sa.String(length=16), nullable=True),
        sa.Column("agent_status_message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node_id"),
    )


def downgrade() -> None:
    op.drop_table("agent_sessions")
