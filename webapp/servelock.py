"""One database, one set of lock servers: a served shop claims its database while it runs.

Two serves started in one folder shared ``./instance/seckill.sqlite`` but each started
its own embedded Redis: each sold the whole stock under its own lock, and the orders
landed in one database (an audit found 199 orders for 100 units under ``token``). The
same happens to serves given *different* ``REDIS_URL``\\ s, or each starting its own five
RedLock nodes (``redlock`` sold 20 of 10 units that way). So:

* a shop that starts any of its servers itself (no ``REDIS_URL``, or no
  ``REDLOCK_URLS``) claims its database alone;
* shops given all of them (the several-hosts layout of docs/deployment.md) share it,
  but only with shops given the same ones: the claim carries a fingerprint of the
  servers ``REDIS_URL``, ``REDLOCK_URLS`` and ``ZOOKEEPER_HOSTS`` reach (not of how they
  are spelled), and a different one is refused.

SQLite: an ``flock`` on ``<database>.serving`` beside the file (the real one, a symlink
resolved), exclusive or shared, with a JSON record in it (who holds it alone, or the
sharers' fingerprint). PostgreSQL: session-level advisory locks on a connection kept
open, the fingerprint as a second shared lock the others can see in ``pg_locks``; the
connection's ``application_name`` names the serve's pid. The kernel drops an ``flock``
when the process ends, however it ends; PostgreSQL drops the session's locks when it
notices the session is gone (at once on a clean exit, after its TCP keepalive time if
the client host vanished; and a session ended by the server, ``pg_terminate_backend``,
ends the claim silently). Other databases: no claim.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import ipaddress
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the database claim's advisory key ("seckserv" in 63 bits); the fingerprints' space
PG_KEY = int.from_bytes(b"seckserv", "big") & 0x7FFF_FFFF_FFFF_FFFF
PG_FINGERPRINTS = int.from_bytes(b"fpr", "big")
#: how long a claim retries while another one is being set up
SETTLE_S = 2.0


class DatabaseInUse(RuntimeError):
    """Another served shop holds the database in a way this one cannot share."""


@dataclass(frozen=True)
class Servers:
    """What a shop sells through besides its database. ``None``: started by the shop
    itself (embedded), so no other shop can share it."""

    redis_url: str | None
    redlock_urls: list[str] | None
    zookeeper_hosts: str | None = None

    @property
    def alone(self) -> bool:
        return self.redis_url is None or self.redlock_urls is None

    def fingerprint(self) -> str:
        """The servers, however their URLs are spelled: ``localhost`` and ``127.0.0.1``,
        ``/0`` or no database number, with or without a password, name one server. The
        text of the URLs was compared: a second host of the same shop given
        ``redis://localhost:6379`` beside one given ``redis://127.0.0.1:6379/0`` was
        refused, "other lock servers" (a multi-host audit). Names are not resolved, and
        the loopback interface is one spelling: hosts that each reach a Redis of their
        own at ``127.0.0.1`` look the same, as they did when the text was compared (a
        sidecar proxy on each host to one shared Redis looks just so, and is right). The
        claim cannot tell them apart: docs/deployment.md says what must be shared."""
        text = json.dumps([_redis_server(self.redis_url) if self.redis_url else None,
                           sorted(_redis_server(url) for url in self.redlock_urls or []),
                           _zookeeper_servers(self.zookeeper_hosts or "")])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


#: names of this machine's loopback interface, one server to a shop
LOOPBACK = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def _address(host: str) -> str:
    """``host`` as spelled, but one way for the loopback interface (``localhost``,
    ``127.0.0.1``, ``::1``). Names are not resolved: the address a name has changes (a
    container recreated, a failover), and a host started after that would have been
    refused beside the others, "other lock servers" (a review)."""
    host = host.strip().strip("[]").lower().rstrip(".")
    if host in LOOPBACK:
        return "loopback"
    with contextlib.suppress(ValueError):  # 127.0.0.2 may be another server's
        if ipaddress.ip_address(host) in (ipaddress.ip_address("127.0.0.1"),
                                          ipaddress.ip_address("::1")):
            return "loopback"
    return host


def _redis_server(url: str) -> str:
    """Which Redis server and database number ``url`` reaches (``redis.connection.parse_url``
    reads it as the shop's clients do)."""
    from redis.connection import parse_url

    try:
        kwargs = parse_url(url)
    except ValueError:
        return url
    number = int(kwargs.get("db") or 0)
    if kwargs.get("path"):  # unix:// : a socket file
        return f"unix:{os.path.realpath(kwargs['path'])}/{number}"
    host = _address(str(kwargs.get("host") or "localhost"))
    return f"{host}:{int(kwargs.get('port') or 6379)}/{number}"


def _zookeeper_servers(hosts: str) -> list[str]:
    """A kazoo hosts string's servers, in order, and its chroot (``h1:2181,h2/shop``)."""
    servers, slash, chroot = hosts.partition("/")
    found = []
    for server in filter(None, (part.strip() for part in servers.split(","))):
        host, colon, port = server.rpartition(":")
        if not colon or "]" in port:  # no port (an IPv6 address alone is bracketed)
            host, port = server, "2181"
        found.append(f"{_address(host)}:{port}")
    return sorted(found) + ([f"/{chroot.strip('/')}"] if slash and chroot.strip("/") else [])


#: the process this one's claims speak for: itself (``seckill serve``), or the gunicorn
#: master a ``claimholder`` holds them for (``speak_for``)
_shop_pid: int | None = None


def speak_for(pid: int) -> None:
    """Name ``pid`` as the shop in the claims this process takes: a refusal named the
    claim holder's pid as "another seckill serve", and killing it would stop the claim,
    not the shop (a deployment audit)."""
    global _shop_pid
    _shop_pid = pid


def shop_pid() -> int:
    """The pid a refused shop is told holds the claim (``speak_for``)."""
    return _shop_pid or os.getpid()


def _another(pid: str) -> str:
    """The shop holding a claim, as a refusal names it (its pid, if still alive)."""
    return f"another seckill shop{f' (pid {pid})' if pid else ''}"


def _embedded_why(where: str, pid: str) -> str:
    return (f"{_another(pid)} is using {where} with Redis servers it started itself: a "
            "second shop on it would sell the stock twice, each under its own lock. Stop "
            "it, or give both the same REDIS_URL and REDLOCK_URLS")


def _alone_why(where: str, pid: str) -> str:
    return (f"{_another(pid)} is using {where}, and this one would start Redis servers "
            "of its own: the two would sell the stock twice, each under its own lock. Stop "
            "it, or give both the same REDIS_URL and REDLOCK_URLS")


def _other_servers_why(where: str, pid: str) -> str:
    return (f"{_another(pid)} is using {where} with other lock servers (REDIS_URL, "
            "REDLOCK_URLS or ZOOKEEPER_HOSTS differ): the two would sell the stock twice. "
            "Give both the same ones")


@contextlib.contextmanager
def claimed(database_url: str, servers: Servers) -> Iterator[None]:
    """Hold ``database_url`` for the ``with`` block: alone when ``servers`` are the
    shop's own, shared with shops of the same ``servers`` otherwise.

    :raises DatabaseInUse: naming the other shop.
    """
    from sqlalchemy.engine import make_url

    from .config import database_url as database_url_for_sqlalchemy
    from .db import sqlite_file

    # postgres:// is no backend SQLAlchemy knows: read as another database, it was not
    # claimed (``seckill showdown`` hands it over as the user spelled it; a CLI audit)
    database_url = database_url_for_sqlalchemy(database_url)
    path = sqlite_file(database_url)
    if path is not None and not path.startswith("file:"):
        # the file itself: a serve given a symlink to it claimed it a second time
        with _sqlite_claim(Path(path).resolve(), servers):
            yield
    elif path is None and make_url(database_url).get_backend_name() == "postgresql":
        with _postgres_claim(database_url, servers):
            yield
    else:
        yield


# --- SQLite: an flock beside the file --------------------------------------------------

def _read(fd: int) -> dict[str, Any]:
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _write(fd: int, record: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)


def _try(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


@contextlib.contextmanager
def _sqlite_claim(database: Path, servers: Servers) -> Iterator[None]:
    marker = database.with_name(database.name + ".serving")
    marker.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(marker, os.O_RDWR | os.O_CREAT, 0o644)
    where, mine = str(database), servers.fingerprint()
    try:
        _take_sqlite(fd, where, servers, mine)
        try:
            yield
        finally:
            if servers.alone:
                os.ftruncate(fd, 0)  # its pid would name a stranger once reused
    finally:
        os.close(fd)  # the flock goes with it


def _take_sqlite(fd: int, where: str, servers: Servers, mine: str) -> None:
    deadline = time.monotonic() + SETTLE_S
    while True:
        if _try(fd, fcntl.LOCK_EX):  # nobody else: this shop writes the record
            if servers.alone:
                _write(fd, {"alone": True, "pid": shop_pid()})
                return
            _write(fd, {"alone": False, "fingerprint": mine, "pid": shop_pid()})
            fcntl.flock(fd, fcntl.LOCK_UN)  # (not atomic: the record is read again)
        if not servers.alone and _try(fd, fcntl.LOCK_SH):
            record = _read(fd)
            if record.get("fingerprint") == mine and not record.get("alone"):
                return
            if record and not record.get("alone"):  # sharers with other servers
                fcntl.flock(fd, fcntl.LOCK_UN)
                raise DatabaseInUse(_other_servers_why(where, _alive(record)))
            fcntl.flock(fd, fcntl.LOCK_UN)  # a record being written: look again
        record = _read(fd)
        if record.get("alone"):
            raise DatabaseInUse(_embedded_why(where, _alive(record)))
        if servers.alone and record.get("fingerprint"):  # shops sharing it hold it
            raise DatabaseInUse(_alone_why(where, _alive(record)))
        if time.monotonic() > deadline:  # a claim being set up all along: give up
            why = _alone_why if servers.alone else _embedded_why
            raise DatabaseInUse(why(where, _alive(record)))
        time.sleep(0.05)


def _alive(record: dict[str, Any]) -> str:
    """The record's pid if that process still exists (else "": a stranger may have it)."""
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return ""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return ""
    except PermissionError:  # someone else's process: it exists
        pass
    return str(pid)


# --- PostgreSQL: advisory locks on a session kept open ------------------------------

@contextlib.contextmanager
def _postgres_claim(database_url: str, servers: Servers) -> Iterator[None]:
    from .config import without_password
    from .db import scratch_engine

    engine = scratch_engine(database_url, application_name=f"seckill serve {shop_pid()}")
    where = without_password(database_url)
    try:
        with engine.connect() as connection:
            try:
                _take_postgres(connection, where, servers)
                yield  # the connection stays open: the locks last as long as it
            finally:
                _let_go_postgres(connection)
    finally:
        engine.dispose()


def _let_go_postgres(connection: Any) -> None:
    """Release the claim's locks before the connection closes. Its close alone lets them
    go when the server's backend has ended, a moment after: a claim right after ours
    (a serve started again) found them held, "another seckill serve (pid ...) is using"
    our own pid (3 of 40 claims in a row on a quiet machine; the suite, once)."""
    from sqlalchemy import text

    with contextlib.suppress(Exception):  # the connection gone: so are its locks
        connection.execute(text("SELECT pg_advisory_unlock_all()"))
        connection.commit()


def _take_postgres(connection: Any, where: str, servers: Servers) -> None:
    from sqlalchemy import text

    def scalar(sql: str, **params: Any) -> Any:
        value = connection.execute(text(sql), params).scalar()
        connection.commit()  # session locks: no transaction is kept open
        return value

    if servers.alone:
        if not scalar("SELECT pg_try_advisory_lock(:key)", key=PG_KEY):
            raise DatabaseInUse(_alone_why(where, _postgres_holders(scalar)))
        return
    if not scalar("SELECT pg_try_advisory_lock_shared(:key)", key=PG_KEY):
        raise DatabaseInUse(_embedded_why(where, _postgres_holders(scalar)))
    mine = int(servers.fingerprint(), 16) & 0x7FFF_FFFF
    scalar("SELECT pg_try_advisory_lock_shared(:space, :fp)", space=PG_FINGERPRINTS, fp=mine)
    other = scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                   "AND database = (SELECT oid FROM pg_database "
                   "WHERE datname = current_database()) "
                   "AND classid = :space AND objsubid = 2 AND objid::bigint <> :fp",
                   space=PG_FINGERPRINTS, fp=mine)
    if other:
        raise DatabaseInUse(_other_servers_why(where, _postgres_holders(scalar)))


def _postgres_holders(scalar: Any) -> str:
    """The pid of another serve's claim session, from its ``application_name``."""
    name = scalar("SELECT application_name FROM pg_stat_activity "
                  "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                  "AND application_name LIKE 'seckill serve %' LIMIT 1")
    return str(name).rsplit(" ", 1)[-1] if name else ""
