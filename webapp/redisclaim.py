"""One Redis database, one shop database: a served shop names itself in its Redis.

``servelock`` keeps two shops with different lock servers off one database. The other
way round went unchecked: ``seckill serve`` on PostgreSQL and a ``seckill showdown``
(its own scratch SQLite) given the same ``REDIS_URL`` wrote one set of sale keys
(``sale:{sku-1}:*``) from two databases. The showdown's reset left the serve's sale
with a stock and a generation its database had never had: its audit said
``consistent: false``, and every purchase, audit and even an admin reset of that sale
answered 503 "being reset or reloaded" until the serve was stopped (a showdown audit).

So a shop given a Redis (not one it started) keeps one connection to it open while it
runs, named ``seckill-shop-<database>-<pid>`` (``CLIENT SETNAME``), where ``<database>``
identifies the database it sells from: the file (and host) of SQLite, PostgreSQL's
database and its cluster's ``system_identifier``. Starting, it names itself first, then reads
``CLIENT LIST``: a live shop on the same Redis database number (the ``db`` of its
connection) selling from another database refuses this one, naming it. Shops of one
database share a Redis, as docs/deployment.md's several hosts do. Two shops started at
the same instant both see each other and both refuse: neither sells twice.

The connection is the claim: it closes when the shop stops, however it stops (the
kernel closes a killed process's sockets; a host that vanished keeps it until Redis's
``tcp-keepalive`` notices). It is not made again: a Redis restart, or a ``timeout``
that closes idle clients, drops it, and with it the check for shops started after; a
Redis that refuses ``CLIENT`` (an ACL, a managed service) is not checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .servelock import DatabaseInUse, shop_pid

#: the prefix of a shop's connection name
PREFIX = "seckill-shop-"


def database_identity(database_url: str) -> str:
    """Which database ``database_url`` is, the same for every spelling of its URL that
    reaches it: 16 hex digits."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from . import db
    from .config import database_url as database_url_for_sqlalchemy
    from .config import without_password

    url = database_url_for_sqlalchemy(database_url)
    path = db.sqlite_file(url)
    if path is not None:  # a file of this host (``file:`` URIs as written)
        file = path if path.startswith("file:") else str(Path(path).resolve())
        where = f"sqlite:{platform.node()}:{file}"
    elif make_url(url).get_backend_name() == "postgresql":
        # the cluster's own identifier (kept across restarts and time zones: its start
        # time was neither, a review), else the URL's server and database
        parts = make_url(url)
        engine = db.scratch_engine(url)
        try:
            with engine.connect() as connection:
                name = connection.execute(text("SELECT current_database()")).scalar_one()
                try:
                    cluster = connection.execute(text(
                        "SELECT system_identifier FROM pg_control_system()")).scalar_one()
                except SQLAlchemyError:  # not granted (a managed server)
                    cluster = f"{parts.host}:{parts.port or 5432}"
        finally:
            engine.dispose()
        where = f"postgresql:{cluster}:{name}"
    else:
        where = without_password(url)
    return hashlib.sha256(where.encode()).hexdigest()[:16]


@contextlib.contextmanager
def claimed(redis_url: str, database: str) -> Iterator[None]:
    """Hold a named connection to ``redis_url`` for the ``with`` block, for the shop
    selling from the database ``database`` (``database_identity``).

    :raises DatabaseInUse: a live shop of another database uses that Redis database.
    """
    import redis

    client = redis.Redis.from_url(redis_url, single_connection_client=True,
                                  socket_connect_timeout=5, socket_timeout=5)
    mine = f"{PREFIX}{database}-{shop_pid()}"
    try:
        try:
            client.client_setname(mine)
            clients = client.client_list()
        except redis.ResponseError:  # CLIENT refused (an ACL, a managed Redis)
            clients = []
        number = int(client.connection_pool.connection_kwargs.get("db") or 0)
        other = _other_shop(clients, mine, database, number)
        if other is not None:
            raise DatabaseInUse(
                f"another seckill shop ({other}) sells from another database through "
                f"this Redis (REDIS_URL, database {number}): the two would overwrite "
                "each other's sales there. Give this one another Redis, or another "
                f"database number (redis://host:port/{number + 1}), or the same "
                "DATABASE_URL")
        yield
    finally:
        client.close()


def _other_shop(clients: list[dict[str, Any]], mine: str, database: str,
                number: int) -> str | None:
    """The first live shop in ``clients`` (``CLIENT LIST``) on Redis database ``number``
    that sells from a database other than ``database``: its pid and address."""
    for entry in clients:
        name = str(entry.get("name") or "")
        if not name.startswith(PREFIX) or name == mine:
            continue
        theirs, _, pid = name[len(PREFIX):].partition("-")
        if theirs != database and int(entry.get("db") or 0) == number:
            return f"pid {pid}, connected from {entry.get('addr', '?')}"
    return None
