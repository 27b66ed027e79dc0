"""Alembic environment: runs on the connection the metastore hands over (see store.migrate)."""

from __future__ import annotations

from alembic import context

from metastore.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
