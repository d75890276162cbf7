"""Persistence: SQLAlchemy models, migrations, queries and the work-item queue."""
