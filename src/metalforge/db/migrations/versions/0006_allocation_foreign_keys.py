"""Foreign keys between nodes and allocations (seed 004).

``allocations.node_id`` references the node (an allocation goes with its
node) and ``nodes.allocation_id`` the allocation (cleared when it goes).
References to rows that no longer exist, which nothing enforced before, are
cleared first.

Revision ID: 0006
Revises: 0005

"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE nodes SET allocation_id = NULL WHERE allocation_id IS NOT NULL "
        "AND allocation_id NOT IN (SELECT id FROM allocations)"
    )
    op.execute(
        "UPDATE allocations SET node_id = NULL WHERE node_id IS NOT NULL "
        "AND node_id NOT IN (SELECT id FROM nodes)"
    )
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.create_foreign_key(
            "fk_allocations_node_id", "nodes", ["node_id"], ["id"], ondelete="CASCADE"
        )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_foreign_key(
            "fk_nodes_allocation_id", "allocations", ["allocation_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_constraint("fk_nodes_allocation_id", type_="foreignkey")
    with op.batch_alter_table("allocations", schema=None) as batch_op:
        batch_op.drop_constraint("fk_allocations_node_id", type_="foreignkey")
