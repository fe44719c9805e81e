"""Alembic's entry: runs the migrations on the URL db.migrate() sets."""

from alembic import context
from sqlalchemy import create_engine

from grader.server.db import Base

url = context.config.get_main_option("sqlalchemy.url")
engine = create_engine(url)
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
