"""Alembic environment: migrations run on the connection ``Database.migrate`` hands in."""

from alembic import context

from hatchway.store.tables import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
