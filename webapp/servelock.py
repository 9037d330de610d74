"""One database, one Redis: ``seckill serve`` claims its database for as long as it runs.

Two serves started in one folder share ``./instance/seckill.sqlite`` but each starts
its own embedded Redis: each sells the whole stock under its own lock, and the orders
land in one database (an audit found 199 orders for 100 units under ``token``). A serve
with an embedded Redis therefore claims its database alone; serves given a
``REDIS_URL`` share it (they share that Redis too, as the several-hosts layout in
docs/deployment.md does), but not with an embedded one.

SQLite: an ``flock`` on ``<database>.serving`` beside the file (exclusive or shared),
with the holder's pid written in it for the message. PostgreSQL: a session-level
advisory lock (``pg_try_advisory_lock`` / ``_shared``) on a connection kept open. The
kernel and the server drop both when the process ends, however it ends. Other
databases: no claim.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: the advisory lock's key: "seckill serve" in 63 bits
PG_KEY = int.from_bytes(b"seckserv", "big") & 0x7FFF_FFFF_FFFF_FFFF


class DatabaseInUse(RuntimeError):
    """Another serve holds the database in a way this one cannot share."""


def _why(embedded: bool, where: str, pid: str = "") -> str:
    other = f"another seckill serve{f' (pid {pid})' if pid else ''}"
    if embedded:
        return (f"{other} is using {where}: a second one with its own embedded Redis "
                "would sell the stock twice (each under its own lock). Stop it, or give "
                "both the same REDIS_URL")
    return (f"{other} is using {where} with its own embedded Redis: sharing it would sell "
            "the stock twice. Stop it, or serve it with this REDIS_URL too")


@contextlib.contextmanager
def claimed(database_url: str, embedded_redis: bool) -> Iterator[None]:
    """Hold ``database_url`` for the ``with`` block: alone when this serve's Redis is
    embedded, shared otherwise. :raises DatabaseInUse: naming the other serve."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite" and url.database and url.database != ":memory:" \
            and not url.database.startswith("file:"):
        with _sqlite_claim(Path(url.database), embedded_redis):
            yield
    elif backend == "postgresql":
        with _postgres_claim(database_url, embedded_redis):
            yield
    else:
        yield


@contextlib.contextmanager
def _sqlite_claim(database: Path, embedded_redis: bool) -> Iterator[None]:
    marker = database.with_name(database.name + ".serving")
    marker.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(marker, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        mode = fcntl.LOCK_EX if embedded_redis else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatabaseInUse(_why(embedded_redis, str(database), _holder(fd))) from None
        if embedded_redis:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # the flock goes with it


def _holder(fd: int) -> str:
    """The pid an embedded-Redis serve wrote, if that process is still there (a serve
    sharing the file writes none: the pid left may be an old one's)."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    if not text.isdigit():
        return ""
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return ""
    except PermissionError:  # someone else's process: it exists
        pass
    return text


@contextlib.contextmanager
def _postgres_claim(database_url: str, embedded_redis: bool) -> Iterator[None]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    from .config import without_password
    from .db import connect_args

    engine = create_engine(database_url, poolclass=NullPool, connect_args=connect_args(
        database_url))
    try:
        with engine.connect() as connection:
            which = "pg_try_advisory_lock" if embedded_redis else "pg_try_advisory_lock_shared"
            got: Any = connection.execute(text(f"SELECT {which}(:key)"),
                                          {"key": PG_KEY}).scalar()
            connection.commit()  # the lock is the session's: no transaction kept open
            if not got:
                raise DatabaseInUse(_why(embedded_redis, without_password(database_url)))
            yield  # the connection stays open: the lock lasts as long as it
    finally:
        engine.dispose()
