"""Alembic environment: runs on the connection handed over by ``Database.upgrade``."""

from __future__ import annotations

from alembic import context

from metalforge.db.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through 'metalforge db upgrade'")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
