"""Run the Alembic migrations from code: ``upgrade(database_url)``.

Alembic normally finds its scripts through ``alembic.ini``; an installed wheel has no
such file at a known path, so we build the ``Config`` here and point
``script_location`` at the ``migrations`` package with ``importlib.resources``.
"""

from __future__ import annotations

import logging
import os
from importlib import resources

from alembic import command
from alembic.config import Config

logger = logging.getLogger(__name__)


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resources.files("migrations")))
    # an attribute, not a main option: configparser would choke on a '%' in a password
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the schema at ``database_url`` to ``revision``; a SQLite file's folder is made."""
    if database_url.startswith("sqlite:///"):
        folder = os.path.dirname(database_url.removeprefix("sqlite:///"))
        if folder:
            os.makedirs(folder, exist_ok=True)
    logger.info("migrating %s to %s", database_url.split("@")[-1], revision)
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)
