"""Allocations, their traits, and the node's allocation.

Revision ID: 0003
Revises: 0002

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=True),
        sa.Column("node_id", sa.Integer(), nullable=True),
        sa.Column("resource_class", sa.String(length=80), nullable=True),
        sa.Column("candidate_nodes", JsonType, nullable=False),
        sa.Column("state", sa.String(length=15), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("conductor_affinity", sa.String(length=255), nullable=True),
        sa.Column("owner", sa.String(length=255), nullable=True),
        sa.Column("extra", JsonType, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("node_id"),
    )
    op.create_index("ix_allocations_state", "allocations", ["state"])
    op.create_index("ix_allocations_conductor_affinity", "allocations", ["conductor_affinity"])
    op.create_table(
        "allocation_traits",
        sa.Column("allocation_id", sa.Integer(), nullable=False),
        sa.Column("trait", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(["allocation_id"], ["allocations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("allocation_id", "trait"),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("allocation_id", sa.Integer(), nullable=True))
        batch_op.create_index("ix_nodes_allocation_id", ["allocation_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index("ix_nodes_allocation_id")
        batch_op.drop_column("allocation_id")
    op.drop_table("allocation_traits")
    op.drop_index("ix_allocations_conductor_affinity", table_name="allocations")
    op.drop_index("ix_allocations_state", table_name="allocations")
    op.drop_table("allocations")
