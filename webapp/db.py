"""Run the Alembic migrations from code: ``upgrade(database_url)``.

Alembic normally finds its scripts through ``alembic.ini``; an installed wheel has no
such file at a known path, so we build the ``Config`` here and point
``script_location`` at the ``migrations`` package with ``importlib.resources``.
"""

from __future__ import annotations

import logging
import os
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url

from .config import database_url as database_url_for_sqlalchemy

logger = logging.getLogger(__name__)

#: a new SQLite file's page size. An order row is ~100 bytes and its UNIQUE (sale_id,
#: user_id) key lands on a random leaf page, so each row of a commit dirties a page of
#: its own, written whole to the WAL: at 2 KB, half the bytes of the default 4 KB. An
#: order cost 14-15 us of CPU to write instead of 19-21 (``python -m
#: loadtest.bench.orderwrites``; docs/performance.md, session 12).
#: It applies only before the file's first write (the migrations' or the app's); an
#: existing file keeps its page size.
SQLITE_PAGE_SIZE = 2048


def sqlite_file_layout(cursor: Any) -> None:
    """Run first on every SQLite connection (DB-API ``cursor``): a file that does not
    exist yet gets our page size; for any other it changes nothing."""
    cursor.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resources.files("migrations")))
    # an attribute, not a main option: configparser would choke on a '%' in a password
    config.attributes["database_url"] = database_url_for_sqlalchemy(database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the schema at ``database_url`` to ``revision``; a SQLite file's folder is made."""
    database_url = database_url_for_sqlalchemy(database_url)
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        folder = os.path.dirname(url.database)
        if folder:
            os.makedirs(folder, exist_ok=True)
    logger.info("migrating %s to %s", database_url.split("@")[-1], revision)
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)
