"""Alembic environment: the target is the web app's metadata (``webapp.models``).

The database URL comes from ``config.attributes["database_url"]`` (set by
``webapp.db``), else the ``DATABASE_URL`` environment variable. SQLite gets batch mode,
since it cannot ALTER most things in place, a new SQLite file our page size
(``webapp.db.SQLITE_PAGE_SIZE``), and SQLite's DDL a transaction
(``webapp.db.sqlite_transactional_ddl``: each migration is all or nothing). On
PostgreSQL one migration runs at a time, whoever started it (the command line, a
starting shop): ``webapp.db.one_migration_at_a_time``, which also bounds its wait for
a table another session holds (``webapp.db.tables_locked_elsewhere``). SQLite's BEGIN
IMMEDIATE does the same for a file. A SQLite file's folder is made.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine

from webapp import config as settings
from webapp import db
from webapp.db import (
    connect_args,
    one_migration_at_a_time,
    sqlite_file,
    sqlite_file_layout,
    sqlite_transactional_ddl,
    tables_locked_elsewhere,
)
from webapp.models import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None:  # the alembic command line: alembic.ini's logging
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    url = config.attributes.get("database_url") or os.environ.get("DATABASE_URL")
    if not url:
        raise RuntimeError("set DATABASE_URL (e.g. sqlite:///instance/seckill.sqlite)")
    return settings.database_url(str(url))  # postgres:// and postgresql:// as the app


def run_migrations_offline() -> None:
    url = database_url()
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = database_url()
    sqlite_file(url, make_folder=True)  # the command line on a fresh clone: no instance/
    engine = create_engine(url, connect_args=connect_args(url))  # a connect timeout
    if url.startswith("sqlite"):  # a migration interrupted midway is rolled back whole
        sqlite_transactional_ddl(engine)
    try:
        with engine.connect() as connection:
            if url.startswith("sqlite"):  # before the first table: a new file's layout
                sqlite_file_layout(connection.connection.cursor())
            context.configure(connection=connection, target_metadata=target_metadata,
                              render_as_batch=url.startswith("sqlite"))
            wait_s = db.MIGRATION_WAIT_S  # read here: a test shortens it
            # around the BEGIN too: SQLite's BEGIN IMMEDIATE waits there for another
            with tables_locked_elsewhere(wait_s), context.begin_transaction():
                one_migration_at_a_time(connection, wait_s)  # before the revision is read
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
