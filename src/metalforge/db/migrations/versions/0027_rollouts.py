"""Rollouts: a change rolled out over many nodes in waves, and each node's part in it.

Revision ID: 0027
Revises: 0026

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=15), nullable=False),
        sa.Column("action", JsonType, nullable=False),
        sa.Column("selector", JsonType, nullable=False),
        sa.Column("canary", sa.Integer(), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("max_failures", sa.Integer(), nullable=False),
        sa.Column("canary_approved", sa.Boolean(), nullable=False),
        sa.Column("window_start", sa.Integer(), nullable=True),
        sa.Column("window_end", sa.Integer(), nullable=True),
        sa.Column("owner", sa.String(length=255), nullable=True),
        sa.Column("created_by", sa.String(length=255), nullable=True),
        sa.Column("paused_reason", sa.String(length=255), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid"),
        sa.UniqueConstraint("name"),
    )
    op.create_index("ix_rollouts_state", "rollouts", ["state"])
    op.create_index("ix_rollouts_owner", "rollouts", ["owner"])
    op.create_table(
        "rollout_nodes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("rollout_id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("node_uuid", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("wave", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=15), nullable=False),
        sa.Column("verbs", sa.String(length=64), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("steps", JsonType, nullable=False),
        sa.Column("disable_ramdisk", sa.Boolean(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("outcome", sa.String(length=15), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("claim", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["rollout_id"], ["rollouts.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("claim"),
    )
    op.create_index("ix_rollout_nodes_rollout_id", "rollout_nodes", ["rollout_id"])
    op.create_index("ix_rollout_nodes_node_id", "rollout_nodes", ["node_id"])


def downgrade() -> None:
    op.drop_table("rollout_nodes")
    op.drop_table("rollouts")
