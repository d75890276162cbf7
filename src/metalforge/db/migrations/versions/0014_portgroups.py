"""Port groups: a node's ports bonded together, and ports' membership of them.

Revision ID: 0014
Revises: 0013

``ports.portgroup_id`` is added as a plain column with its foreign key
(SQLite adds such a column in place; the nodes table is not touched).

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "portgroups",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(length=36), nullable=False, unique=True),
        sa.Column("name", sa.String(length=255), nullable=True, unique=True),
        sa.Column("address", sa.String(length=18), nullable=True, unique=True),
        sa.Column(
            "node_id",
            sa.Integer(),
            sa.ForeignKey("nodes.id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("extra", JsonType, nullable=False),
        sa.Column("internal_info", JsonType, nullable=False),
        sa.Column("standalone_ports_supported", sa.Boolean(), nullable=False),
        sa.Column("mode", sa.String(length=255), nullable=True),
        sa.Column("properties", JsonType, nullable=False),
        sa.Column("physical_network", sa.String(length=64), nullable=True),
        sa.Column("category", sa.String(length=80), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
    )
    if op.get_bind().dialect.name == "sqlite":
        # ALTER TABLE ... ADD COLUMN with its REFERENCES clause: in place, no rebuild.
        op.execute(
            "ALTER TABLE ports ADD COLUMN portgroup_id INTEGER "
            "CONSTRAINT fk_ports_portgroup_id REFERENCES portgroups (id)"
        )
    else:
        op.add_column("ports", sa.Column("portgroup_id", sa.Integer(), nullable=True))
        op.create_foreign_key(
            "fk_ports_portgroup_id", "ports", "portgroups", ["portgroup_id"], ["id"]
        )
    op.create_index("ix_ports_portgroup_id", "ports", ["portgroup_id"])


def downgrade() -> None:
    op.drop_index("ix_ports_portgroup_id", table_name="ports")
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE ports DROP COLUMN portgroup_id")
    else:
        op.drop_constraint("fk_ports_portgroup_id", "ports", type_="foreignkey")
        op.drop_column("ports", "portgroup_id")
    op.drop_table("portgroups")
