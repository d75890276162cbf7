"""Inspection data: ``raw_folded``, so a processed report is stored once.

Revision ID: 0018
Revises: 0017

Once a report is processed, its raw copy is emptied and rebuilt from the
processed data; ``raw_folded`` names the keys processing also derives that
the report itself carried (with the same values), so the rebuild keeps
exactly the report's keys. Added in place (SQLite's ADD COLUMN).

"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(JSONB(), "postgresql")
    op.add_column("inspection_data", sa.Column("raw_folded", json_type, nullable=True))


def downgrade() -> None:
    op.drop_column("inspection_data", "raw_folded")
