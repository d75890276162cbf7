"""Runbooks, their steps and their traits.

Revision ID: 0021
Revises: 0020

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runbooks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=True),
        sa.Column("owner", sa.String(length=255), nullable=True),
        sa.Column("public", sa.Boolean(), nullable=False),
        sa.Column("disable_ramdisk", sa.Boolean(), nullable=False),
        sa.Column("extra", JsonType, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("uuid"),
    )
    with op.batch_alter_table("runbooks", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runbooks_owner"), ["owner"], unique=False)
    op.create_table(
        "runbook_steps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("runbook_id", sa.Integer(), nullable=False),
        sa.Column("interface", sa.String(length=255), nullable=False),
        sa.Column("step", sa.String(length=255), nullable=False),
        sa.Column("args", JsonType, nullable=False),
        sa.Column("order", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["runbook_id"], ["runbooks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runbook_steps", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_runbook_steps_runbook_id"), ["runbook_id"], unique=False
        )
    op.create_table(
        "runbook_traits",
        sa.Column("runbook_id", sa.Integer(), nullable=False),
        sa.Column("trait", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(["runbook_id"], ["runbooks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("runbook_id", "trait"),
    )
    with op.batch_alter_table("runbook_traits", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runbook_traits_trait"), ["trait"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("runbook_traits", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runbook_traits_trait"))
    op.drop_table("runbook_traits")
    with op.batch_alter_table("runbook_steps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runbook_steps_runbook_id"))
    op.drop_table("runbook_steps")
    with op.batch_alter_table("runbooks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runbooks_owner"))
    op.drop_table("runbooks")
