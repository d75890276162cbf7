"""Volume connectors and volume targets: how a node reaches remote volumes, and which.

Revision ID: 0015
Revises: 0014

Two new tables whose rows belong to a node (``node_id``, deleted with it);
the nodes table itself is not touched (rebuilding it on SQLite would drop
its event triggers). The uniqueness rules are Ironic's: a connector's
``(type, connector_id)`` across the deployment, a target's ``boot_index``
per node.

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def _node_id() -> sa.Column[int]:
    return sa.Column(
        "node_id",
        sa.Integer(),
        sa.ForeignKey("nodes.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    )


def upgrade() -> None:
    op.create_table(
        "volume_connectors",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(length=36), nullable=False, unique=True),
        _node_id(),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("connector_id", sa.String(length=255), nullable=False),
        sa.Column("extra", JsonType, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.UniqueConstraint("type", "connector_id", name="uq_volume_connectors_type_connector_id"),
    )
    op.create_table(
        "volume_targets",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(length=36), nullable=False, unique=True),
        _node_id(),
        sa.Column("volume_type", sa.String(length=64), nullable=False),
        sa.Column("volume_id", sa.String(length=36), nullable=False),
        sa.Column("boot_index", sa.Integer(), nullable=False),
        sa.Column("properties", JsonType, nullable=False),
        sa.Column("extra", JsonType, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.UniqueConstraint("node_id", "boot_index", name="uq_volume_targets_node_id_boot_index"),
    )


def downgrade() -> None:
    op.drop_table("volume_targets")
    op.drop_table("volume_connectors")
