"""Nodes: ``flow_request_id``, the request that started the node's current flow.

Revision ID: 0020
Revises: 0019

Added in place (SQLite's ADD COLUMN): the nodes table and its event
triggers stay as they are.

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("flow_request_id", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("nodes", "flow_request_id")
