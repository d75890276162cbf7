"""Initial schema: nodes, traits, ports, conductors, work items, node history.

Revision ID: 0001
Revises:

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from metalforge.db.models import JsonType, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conductors",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("conductor_group", sa.String(length=255), nullable=False),
        sa.Column("drivers", JsonType, nullable=False),
        sa.Column("online", sa.Boolean(), nullable=False),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("hostname"),
    )
    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=True),
        sa.Column("driver", sa.String(length=255), nullable=False),
        sa.Column("driver_info", JsonType, nullable=False),
        sa.Column("driver_internal_info", JsonType, nullable=False),
        sa.Column("instance_info", JsonType, nullable=False),
        sa.Column("properties", JsonType, nullable=False),
        sa.Column("extra", JsonType, nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=True),
        sa.Column("chassis_uuid", sa.String(length=36), nullable=True),
        sa.Column("console_enabled", sa.Boolean(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("maintenance", sa.Boolean(), nullable=False),
        sa.Column("maintenance_reason", sa.Text(), nullable=True),
        sa.Column("fault", sa.String(length=255), nullable=True),
        sa.Column("power_state", sa.String(length=15), nullable=True),
        sa.Column("target_power_state", sa.String(length=15), nullable=True),
        sa.Column("provision_state", sa.String(length=15), nullable=False),
        sa.Column("target_provision_state", sa.String(length=15), nullable=True),
        sa.Column("provision_updated_at", UTCDateTime(), nullable=True),
        sa.Column("reservation", sa.String(length=255), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("conductor_affinity", sa.String(length=255), nullable=True),
        sa.Column("clean_step", JsonType, nullable=False),
        sa.Column("deploy_step", JsonType, nullable=False),
        sa.Column("service_step", JsonType, nullable=False),
        sa.Column("raid_config", JsonType, nullable=False),
        sa.Column("target_raid_config", JsonType, nullable=False),
        sa.Column("resource_class", sa.String(length=80), nullable=True),
        sa.Column("conductor_group", sa.String(length=255), nullable=False),
        sa.Column("automated_clean", sa.Boolean(), nullable=True),
        sa.Column("protected", sa.Boolean(), nullable=False),
        sa.Column("protected_reason", sa.Text(), nullable=True),
        sa.Column("owner", sa.String(length=255), nullable=True),
        sa.Column("lessee", sa.String(length=255), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("retired", sa.Boolean(), nullable=False),
        sa.Column("retired_reason", sa.Text(), nullable=True),
        sa.Column("network_data", JsonType, nullable=False),
        sa.Column("boot_mode", sa.String(length=16), nullable=True),
        sa.Column("secure_boot", sa.Boolean(), nullable=True),
        sa.Column("shard", sa.String(length=255), nullable=True),
        sa.Column("parent_node", sa.String(length=36), nullable=True),
        sa.Column("disable_power_off", sa.Boolean(), nullable=False),
        sa.Column("instance_name", sa.String(length=255), nullable=True),
        sa.Column("inspection_started_at", UTCDateTime(), nullable=True),
        sa.Column("inspection_finished_at", UTCDateTime(), nullable=True),
        sa.Column("bios_interface", sa.String(length=255), nullable=True),
        sa.Column("boot_interface", sa.String(length=255), nullable=True),
        sa.Column("console_interface", sa.String(length=255), nullable=True),
        sa.Column("deploy_interface", sa.String(length=255), nullable=True),
        sa.Column("firmware_interface", sa.String(length=255), nullable=True),
        sa.Column("inspect_interface", sa.String(length=255), nullable=True),
        sa.Column("management_interface", sa.String(length=255), nullable=True),
        sa.Column("network_interface", sa.String(length=255), nullable=True),
        sa.Column("power_interface", sa.String(length=255), nullable=True),
        sa.Column("raid_interface", sa.String(length=255), nullable=True),
        sa.Column("rescue_interface", sa.String(length=255), nullable=True),
        sa.Column("storage_interface", sa.String(length=255), nullable=True),
        sa.Column("vendor_interface", sa.String(length=255), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("instance_uuid"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("uuid"),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_nodes_provision_state"), ["provision_state"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_nodes_reservation"), ["reservation"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_nodes_resource_class"), ["resource_class"], unique=False
        )

    op.create_table(
        "work_items",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=True),
        sa.Column("payload", JsonType, nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("preferred_owner", sa.String(length=255), nullable=True),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("not_before", UTCDateTime(), nullable=False),
        sa.Column("dedupe_key", sa.String(length=255), nullable=True),
        sa.Column("rerun", sa.Boolean(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dedupe_key", name="uq_work_items_dedupe_key"),
    )
    with op.batch_alter_table("work_items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_work_items_node_id"), ["node_id"], unique=False)
        batch_op.create_index("ix_work_items_ready", ["state", "not_before"], unique=False)

    op.create_table(
        "node_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("conductor", sa.String(length=255), nullable=True),
        sa.Column("event_type", sa.String(length=255), nullable=False),
        sa.Column("event", sa.Text(), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("user", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=15), nullable=True),
        sa.Column("target_provision_state", sa.String(length=15), nullable=True),
        sa.Column("duration_seconds", sa.Float(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid"),
    )
    with op.batch_alter_table("node_history", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_node_history_node_id"), ["node_id"], unique=False)

    op.create_table(
        "node_traits",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("trait", sa.String(length=255), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node_id", "trait"),
    )
    op.create_table(
        "ports",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("address", sa.String(length=18), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=True),
        sa.Column("pxe_enabled", sa.Boolean(), nullable=False),
        sa.Column("local_link_connection", JsonType, nullable=False),
        sa.Column("physical_network", sa.String(length=64), nullable=True),
        sa.Column("internal_info", JsonType, nullable=False),
        sa.Column("extra", JsonType, nullable=False),
        sa.Column("is_smartnic", sa.Boolean(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("vendor", sa.String(length=255), nullable=True),
        sa.Column("category", sa.String(length=80), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("address"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("uuid"),
    )
    with op.batch_alter_table("ports", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ports_node_id"), ["node_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("ports", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_ports_node_id"))

    op.drop_table("ports")
    op.drop_table("node_traits")
    with op.batch_alter_table("node_history", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_node_history_node_id"))

    op.drop_table("node_history")
    with op.batch_alter_table("work_items", schema=None) as batch_op:
        batch_op.drop_index("ix_work_items_ready")
        batch_op.drop_index(batch_op.f("ix_work_items_node_id"))

    op.drop_table("work_items")
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_nodes_resource_class"))
        batch_op.drop_index(batch_op.f("ix_nodes_reservation"))
        batch_op.drop_index(batch_op.f("ix_nodes_provision_state"))

    op.drop_table("nodes")
    op.drop_table("conductors")
