"""Run the Alembic migrations from code: ``upgrade(database_url)``.

Alembic normally finds its scripts through ``alembic.ini``; an installed wheel has no
such file at a known path, so we build the ``Config`` here and point
``script_location`` at the ``migrations`` package with ``importlib.resources``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

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


def sqlite_transactional_ddl(engine: Engine) -> None:
    """Have ``engine``'s SQLite transactions cover DDL too, as SQLAlchemy's SQLite
    documentation shows ("Enabling Non-Legacy SQLite Transactional Modes"): the driver
    sends no BEGIN of its own (``isolation_level = None``) and SQLAlchemy sends one
    where its transaction begins.

    For the migrations' engine. Python's sqlite3 (its legacy transaction control, the
    default before Python 3.16) sends BEGIN before INSERT, UPDATE and DELETE only, so
    each CREATE TABLE committed on its own: a migration interrupted midway (a Ctrl-C)
    left its first tables behind, and every later start failed on them ("table
    _alembic_tmp_orders already exists" after 0003's rebuild of ``orders``, "table
    products already exists" after a new file's 0001). With BEGIN sent, Alembic's
    transaction per migration holds the migration and its ``alembic_version`` stamp,
    and SQLite rolls back the whole of an interrupted one. The app's engine keeps the
    driver's behaviour: it runs no DDL. One migration at a time, too: the BEGIN takes
    the write lock, and another migrating waits up to ``MIGRATION_WAIT_S``."""

    @event.listens_for(engine, "connect")
    def _no_driver_begin(dbapi_connection: Any, record: Any) -> None:
        # the recipe needs the legacy control, where isolation_level rules; Python 3.12+
        # names it, and is to make ``autocommit=False`` (its own BEGINs) the default
        legacy = getattr(sqlite3, "LEGACY_TRANSACTION_CONTROL", None)
        if legacy is not None:
            dbapi_connection.autocommit = legacy
        dbapi_connection.isolation_level = None

        # two migrations at once (two deploy scripts, a script beside a starting shop):
        # the second waits for the first to commit (``BEGIN IMMEDIATE`` below) this long
        dbapi_connection.execute(f"PRAGMA busy_timeout={int(MIGRATION_WAIT_S * 1000)}")

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        # IMMEDIATE: the write lock before the revision is read. With a plain (deferred)
        # BEGIN two racers both read the revision, both went to write, and SQLite told
        # the second "database is locked" at once, without waiting out the busy timeout
        # (a migrations audit: 3 of 12 migrate-and-seed lines at once failed so)
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resources.files("migrations")))
    # an attribute, not a main option: configparser would choke on a '%' in a password
    config.attributes["database_url"] = database_url_for_sqlalchemy(database_url)
    return config


#: how long a PostgreSQL connection may take to open: a server that accepts and never
#: answers (a wrong port, a frozen host) hung ``seckill serve`` for good
PG_CONNECT_TIMEOUT_S = 10
#: the server cancels a statement of the shop's that runs longer: a statement stuck
#: behind another transaction's lock fails. Without it a buyer waited as long as the
#: lock was held (a PostgreSQL audit: 44 s behind a table lock, past the 30 s a proxy in
#: front waits). One statement's bound, not an order write's: a write is several
#: statements and a queue, and has a budget of its own (``writedeadline.py``, which
#: lowers this within its transaction).
PG_STATEMENT_TIMEOUT_MS = 10_000
#: a transaction of the shop's left open and idle this long is ended by the server, and
#: the locks it held with it
PG_IDLE_IN_TRANSACTION_MS = 60_000
#: a server that stops acknowledging what we send (host down, network cut): the
#: connection fails after this, where TCP retransmits for about 15 minutes. While a
#: buyer waited that long, its units were neither sold nor back in stock.
PG_TCP_USER_TIMEOUT_MS = 15_000
#: the text the shop sends and reads, whatever the database's encoding (``connect_args``)
PG_CLIENT_ENCODING = "UTF8"
#: an idle pooled connection to a server that went away is noticed in 10 + 3 x 5 s
PG_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                 "keepalives_count": 3}


def connect_args(database_url: str, *, serving: bool = False) -> dict[str, Any]:
    """The driver's connection options every engine of ours passes. PostgreSQL: a
    connect timeout, TCP keepalives and a send timeout, UTF-8 text, and for the serving
    shop (``serving``) a statement timeout; any of them the URL sets itself is left to
    it (``?options=...`` replaces both server-side settings).

    UTF-8 whatever the database's own encoding (``PG_CLIENT_ENCODING``): psycopg speaks
    the database's by default, and on SQL_ASCII handed text back as bytes (``seckill
    serve`` could not start: "TypeError: cannot use a string pattern on a bytes-like
    object"); on LATIN1 a buyer named 小明 was a 500, psycopg failing to encode the name.
    Now SQL_ASCII keeps the bytes sent, and LATIN1 refuses what it cannot hold with an
    error of its own (503, the unit back)."""
    url = make_url(database_url_for_sqlalchemy(database_url))
    if url.get_backend_name() != "postgresql":
        return {}
    wanted: dict[str, Any] = {"connect_timeout": PG_CONNECT_TIMEOUT_S, **PG_KEEPALIVES,
                              "tcp_user_timeout": PG_TCP_USER_TIMEOUT_MS,
                              "client_encoding": PG_CLIENT_ENCODING}
    if serving:
        wanted["options"] = (f"-c statement_timeout={PG_STATEMENT_TIMEOUT_MS} "
                             f"-c idle_in_transaction_session_timeout="
                             f"{PG_IDLE_IN_TRANSACTION_MS}")
    return {name: value for name, value in wanted.items() if name not in url.query}


def scratch_engine(database_url: str, **more_connect_args: Any) -> Engine:
    """An engine for one job (migrating, checking, a serve's claim): no pool kept, the
    connect timeout; ``more_connect_args`` go to the driver as well."""
    database_url = database_url_for_sqlalchemy(database_url)
    return create_engine(database_url, poolclass=NullPool,
                         connect_args={**connect_args(database_url), **more_connect_args})


#: ``pg_advisory_lock``'s key for "migrating and seeding": any constant of our own
MIGRATION_LOCK_KEY = 0x5EC_4111


class UnversionedSchema(RuntimeError):
    """The database has our tables but no ``alembic_version``: made without migrations."""


class UnknownRevision(RuntimeError):
    """The database's ``alembic_version`` names a revision none of our migrations has."""


def sqlite_file(database_url: str, *, make_folder: bool = False) -> str | None:
    """The file of a SQLite ``database_url`` (None: not SQLite, or in memory); with
    ``make_folder``, its folder is made if missing."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    if make_folder and os.path.dirname(url.database):
        os.makedirs(os.path.dirname(url.database), exist_ok=True)
    return url.database


#: how long a start waits for another process migrating the same database
MIGRATION_WAIT_S = 120.0


class MigrationBusy(RuntimeError):
    """Another process kept migrating this database past ``MIGRATION_WAIT_S``."""


@contextlib.contextmanager
def migration_lock(database_url: str, wait_s: float = MIGRATION_WAIT_S) -> Iterator[None]:
    """One process at a time migrates and seeds ``database_url``.

    Two ``seckill serve`` started at once on a new database both ran ``alembic upgrade
    head`` and the demo seeding: the second died on a duplicate table or product.
    PostgreSQL: a session advisory lock on a connection of its own, in autocommit (no
    transaction left open beside the migration). SQLite: ``flock`` on a file beside the
    database. Both are freed if we die; a peer that hangs costs ``wait_s`` at most.
    """
    database_url = database_url_for_sqlalchemy(database_url)
    path = sqlite_file(database_url, make_folder=True)
    deadline = time.monotonic() + wait_s
    if path is not None:  # beside the file itself: a symlink to it is the same database
        with open(f"{os.path.realpath(path)}.migrating", "a") as held:  # closing lets go
            while True:
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    _wait_or_give_up(deadline, wait_s)
            yield
        return
    if make_url(database_url).get_backend_name() != "postgresql":
        yield
        return
    engine = scratch_engine(database_url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            key = {"key": MIGRATION_LOCK_KEY}
            while not connection.execute(text("SELECT pg_try_advisory_lock(:key)"),
                                         key).scalar():
                _wait_or_give_up(deadline, wait_s)
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), key)
    finally:
        engine.dispose()


#: ``pg_advisory_xact_lock``'s key for "a migration runs" (``one_migration_at_a_time``).
#: Not ``MIGRATION_LOCK_KEY``: a starting shop holds that one on a connection of its own
#: while its migrations run on another.
ALEMBIC_LOCK_KEY = MIGRATION_LOCK_KEY + 1


def one_migration_at_a_time(connection: Connection, wait_s: float = MIGRATION_WAIT_S) -> None:
    """Called by ``migrations/env.py`` in the migrations' transaction, before Alembic
    reads the revision: on PostgreSQL, wait (``wait_s`` at most, then ``MigrationBusy``)
    for any other migration of this database to end; the lock goes with the transaction.

    ``migration_lock`` serialises shops only: two ``alembic upgrade head`` from two
    deploy hosts (or one beside a starting shop) both read revision 0001, both ran 0002,
    and the second failed ``index "ix_orders_sale_id" does not exist``. Here the second
    reads the revision once the first has committed, and finds head.

    The migration's own statements then wait ``wait_s`` at most for a table's lock too
    (unless the session has a ``lock_timeout`` of its own): an ``ALTER TABLE`` behind
    another session's open transaction (an operator's psql) held a starting shop,
    silent, until that transaction ended, for ever if it never did. Past it,
    ``tables_locked_elsewhere`` says so."""
    if connection.dialect.name != "postgresql":
        return
    was = connection.execute(text("SHOW lock_timeout")).scalar()
    connection.execute(text("SELECT set_config('lock_timeout', :ms, true)"),
                       {"ms": f"{int(wait_s * 1000)}ms"})
    try:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                           {"key": ALEMBIC_LOCK_KEY})
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) == "55P03":  # lock_not_available
            raise MigrationBusy(f"another process has been migrating this database for "
                                f"over {wait_s:g}s") from None
        raise
    if was != "0":  # the session's own bound, for the migration's statements too
        connection.execute(text("SELECT set_config('lock_timeout', :was, true)"),
                           {"was": was})


@contextlib.contextmanager
def tables_locked_elsewhere(wait_s: float = MIGRATION_WAIT_S) -> Iterator[None]:
    """Around the migrations (``migrations/env.py``): a statement that waited past the
    lock timeout ``one_migration_at_a_time`` set (or a SQLite BEGIN past its busy
    timeout) is ``MigrationBusy`` naming the cause, not the driver's "canceling
    statement due to lock timeout" and a traceback. The transaction is rolled back:
    nothing of the migration stays."""
    try:
        yield
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) == "55P03":  # lock_not_available
            raise MigrationBusy(
                f"the migration waited past its lock timeout ({wait_s:g} s unless the "
                "session sets its own) for a table another session holds locked (an open "
                "transaction: see pg_stat_activity); nothing was changed") from None
        if isinstance(exc.orig, sqlite3.OperationalError) and "locked" in str(exc.orig):
            # BEGIN IMMEDIATE waited out its busy timeout (``sqlite_transactional_ddl``):
            # it was the driver's "database is locked" and a traceback (a review)
            raise MigrationBusy(f"another process has been writing this SQLite file for "
                                f"over {wait_s:g}s (another migration, or a shop's "
                                "long write); nothing was changed") from None
        raise


def _wait_or_give_up(deadline: float, wait_s: float) -> None:
    if time.monotonic() > deadline:
        raise MigrationBusy(f"another process has been migrating this database for over "
                            f"{wait_s:g}s; is a seckill serve stuck starting?")
    time.sleep(0.1)


def _refuse_unversioned(database_url: str) -> None:
    """Alembic would try to create tables that exist and fail with the driver's error."""
    path = sqlite_file(database_url)
    if path is not None and not os.path.exists(path):
        return  # a new file: the migrations create it, with our page size
    engine = scratch_engine(database_url)
    try:
        with engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
    finally:
        engine.dispose()
    ours = tables & {"products", "sales", "orders"}
    if ours and "alembic_version" not in tables:
        raise UnversionedSchema(
            f"the database has seckill's tables ({', '.join(sorted(ours))}) but no "
            "alembic_version table, so its schema revision is unknown. If the tables "
            "match the newest migration, record that with `alembic -c migrations/alembic.ini "
            "stamp head` (DATABASE_URL set); otherwise use a new database")


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the schema at ``database_url`` to ``revision``; a SQLite file's folder is made.
    Callers that may race (several servers on one database) hold ``migration_lock``: on
    PostgreSQL the migrations also wait for each other (``one_migration_at_a_time``), but
    a shop's seeding after them needs the lock too."""
    database_url = database_url_for_sqlalchemy(database_url)
    sqlite_file(database_url, make_folder=True)
    _refuse_unversioned(database_url)
    logger.info("migrating %s to %s", database_url.split("@")[-1], revision)
    from alembic.util import CommandError

    try:
        command.upgrade(alembic_config(database_url), revision)
    except CommandError as exc:
        # it said only "Can't locate revision identified by 'ae1027a6acf'" (a migrations
        # audit): a newer seckill's revision, or another application's alembic_version
        found = re.search(r"Can't locate revision identified by '([^']*)'", str(exc))
        if found is None:
            raise
        raise UnknownRevision(
            f"the database's schema is at revision {found.group(1)!r} (its alembic_version "
            "table), which this seckill's migrations do not have: a newer seckill "
            "migrated it, or another application's Alembic keeps its version there. Use "
            "the seckill that migrated it, or a database of seckill's own") from None


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)
