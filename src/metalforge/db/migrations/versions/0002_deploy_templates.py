"""Deploy templates and their steps.

Revision ID: 0002
Revises: 0001

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deploy_templates",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("extra", JsonType, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("uuid"),
    )
    op.create_table(
        "deploy_template_steps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("deploy_template_id", sa.Integer(), nullable=False),
        sa.Column("interface", sa.String(length=255), nullable=False),
        sa.Column("step", sa.String(length=255), nullable=False),
        sa.Column("args", JsonType, nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["deploy_template_id"], ["deploy_templates.id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("deploy_template_steps", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_deploy_template_steps_deploy_template_id"),
            ["deploy_template_id"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("deploy_template_steps", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_deploy_template_steps_deploy_template_id"))
    op.drop_table("deploy_template_steps")
    op.drop_table("deploy_templates")
