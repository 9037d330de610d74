"""A PostgreSQL database of our own for one run, created on entry and dropped on exit.

The multi-host run needs a database two web hosts can share, which SQLite on one
machine's disk is not. We never touch an existing database: each run creates
``seckill_mh_<pid>_<random>`` through the admin URL (``SECKILL_PG_ADMIN_URL``, default
``postgresql://127.0.0.1:5432/test`` with trust auth) and drops it ``WITH (FORCE)``,
which also ends the connections the web hosts left open.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from urllib.parse import urlencode

logger = logging.getLogger(__name__)

DEFAULT_ADMIN_URL = "postgresql://127.0.0.1:5432/test"


class DatabaseUnavailable(RuntimeError):
    """PostgreSQL is not reachable with the admin URL (or psycopg is missing)."""


def admin_url() -> str:
    return libpq_url(os.environ.get("SECKILL_PG_ADMIN_URL", DEFAULT_ADMIN_URL))


def libpq_url(url: str) -> str:
    """``url`` as libpq takes it: a SQLAlchemy URL's driver (``postgresql+psycopg://``,
    the form ``DATABASE_URL`` takes) dropped; psycopg refused it with a traceback
    ('missing "=" after ... in connection info string')."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.split("+", 1)[0] in ("postgresql", "postgres"):
        return f"postgresql://{rest}"
    return url


@contextlib.contextmanager
def temporary_database(url: str | None = None) -> Iterator[str]:
    """Yield a SQLAlchemy URL (``postgresql+psycopg://...``) of a fresh, empty database."""
    try:
        import psycopg
        from psycopg import sql
        from psycopg.conninfo import conninfo_to_dict
    except ImportError as exc:
        raise DatabaseUnavailable(f"psycopg is not installed: {exc}") from exc
    url = libpq_url(url) if url else admin_url()
    name = f"seckill_mh_{os.getpid()}_{os.urandom(4).hex()}"
    try:
        admin = psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"cannot connect to PostgreSQL at {url}: {exc}") from exc
    except psycopg.ProgrammingError as exc:  # not a URL or conninfo libpq reads
        raise DatabaseUnavailable(f"SECKILL_PG_ADMIN_URL {url!r} is not a PostgreSQL URL "
                                  f"libpq takes: {exc}") from exc
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        logger.info("created database %s", name)
        try:
            params = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
            params["dbname"] = name
            yield "postgresql+psycopg:///?" + urlencode(params)  # libpq params, any auth
        finally:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                          .format(sql.Identifier(name)))
            logger.info("dropped database %s", name)
