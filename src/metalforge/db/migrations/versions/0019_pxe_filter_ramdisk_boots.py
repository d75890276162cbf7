"""The PXE filter also lets through nodes booting the agent's ramdisk: wake it when one
begins or ends (PostgreSQL).

Revision ID: 0019
Revises: 0018

A ramdisk boot begins or ends with a write of ``agent_sessions.booted_at``;
a heartbeat writes the same row without it, and must not wake every filter
host. SQLite's side is ``db.changes``.

"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_EVENTS = "INSERT OR UPDATE OF booted_at OR DELETE"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # The function migration 0011 created: it notifies the filter's channel.
    op.execute(
        f"CREATE TRIGGER metalforge_pxe_filter_agent_sessions AFTER {_EVENTS} ON agent_sessions "
        "FOR EACH STATEMENT EXECUTE FUNCTION metalforge_pxe_filter_changed()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER metalforge_pxe_filter_agent_sessions ON agent_sessions")
