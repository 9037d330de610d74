"""``ServedApp``: the whole shop as a context manager. It starts embedded Redis and
SQLite unless it is given URLs, runs the migrations, seeds the demo products and starts
gunicorn. The showdown, the labs, the tests and ``seckill serve`` all use it::

    with ServedApp(workers=2) as app:
        requests.get(app.url + "/api/products")

Everything it starts (redis-server processes, gunicorn, a temp SQLite file) it stops
by pid and removes on exit; what it is given (``redis_url``...) it leaves alone.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import functools
import itertools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

from lockcore.embedded import EmbeddedRedis, RedisServer, free_port
from lockcore.lifeline import tied_to_parent
from lockcore.zkserver import any_answers

from . import config as settings
from . import db, demo, locks, redisclaim, servelock
from .extensions import Backends
from .problems import first_line

#: started and not yet stopped; stopped at interpreter exit if the owner forgot
_live: set[ServedApp] = set()


class StartupError(RuntimeError):
    """The shop could not be served (its port is taken, gunicorn did not come up)."""


#: the log's size at which ``rotate_log`` moves it aside, and how many old ones it keeps
LOG_MAX_BYTES = 10 * 1024 * 1024
LOG_BACKUPS = 3

#: how long the checks before starting wait for a server given by URL
REACH_TIMEOUT_S = 5
NOTE_TIMEOUT_S = 1  # a lock server that is not needed to start: a note, not a wait


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(getattr(exc, 'orig', None) or exc)}"


def _one_try_client(url: str, timeout: float) -> Any:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # one try: redis-py 8 retries three times with backoff, 20 s for a silent server
    return redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout,
                                retry=Retry(NoBackoff(), 0))


def _redis_problem(url: str, timeout: float = REACH_TIMEOUT_S) -> str | None:
    """Why the Redis at ``url`` does not answer a PING in ``timeout`` (None: it does)."""
    import redis

    client = _one_try_client(url, timeout)
    try:
        client.ping()
    except redis.RedisError as exc:
        return _first_line(exc)
    finally:
        client.close()
    return None


def _redis_info(url: str) -> dict[str, Any]:
    """The ``INFO`` fields that say what kind of Redis ``url`` is (cluster, replication,
    memory); empty if it will not say (an ACL user without ``INFO``: not checked)."""
    import redis

    client = _one_try_client(url, REACH_TIMEOUT_S)
    fields: dict[str, Any] = {}
    try:
        try:  # a Sentinel answers INFO (its server section says so) and no data command
            fields["redis_mode"] = client.info("server").get("redis_mode")
            for section in ("cluster", "replication", "memory"):  # one each: Redis 6.2
                fields.update(client.info(section))
            if fields.get("cluster_enabled"):  # its shards: cluster_size
                fields.update(client.execute_command("CLUSTER INFO"))
        except redis.RedisError:
            return {}
        try:  # how it persists (CONFIG may be refused or renamed: not checked then)
            for name in ("save", "appendonly", "appendfsync"):
                fields.update({f"config_{k}": v for k, v in client.config_get(name).items()})
        except redis.RedisError:
            pass
    finally:
        client.close()
    return fields


def unfit_redis(info: dict[str, Any]) -> str | None:
    """Why a Redis with these ``INFO`` fields cannot hold the sale (None: it can).

    * A **replica** refuses every write: each purchase and reset would be a 503 (a
      Redis audit served against one: 20 of 20 buyers "redis is unavailable").
    * A **cluster of several shards** answers the shop's single-node client with MOVED
      for the keys on other nodes: serve failed with a raw ``MovedError``. The keys are
      laid out for a cluster (docs/deployment.md, "Hash tags"); the client is not. A
      one-node cluster owning every slot never redirects: it serves (the hash-tag tests
      run the shop on one).
    * A **Sentinel** (``redis-server --sentinel``, port 26379) answers PING and INFO and
      refuses every data command: serve failed on a fresh database with "Busy: the sale
      of sku-1 was reset in the database (its orders deleted), but Redis refused the new
      stock (unknown command 'WATCH')", on one with orders with "ResponseError: unknown
      command 'HGETALL'" (a Redis HA audit).
    """
    if info.get("redis_mode") == "sentinel":
        return ("a Redis Sentinel (INFO server: redis_mode sentinel), which holds no "
                "data: give the shop the address of the primary it watches (SENTINEL "
                "get-master-addr-by-name <name>); the shop does not follow a failover")
    if info.get("role") == "slave":
        return ("a read-only replica (INFO replication: role slave): every purchase "
                "would be refused; give the shop the primary")
    shards = int(info.get("cluster_size", 0) or 0) if info.get("cluster_enabled") else 0
    if shards > 1:
        return (f"a Redis Cluster of {shards} shards: the shop's client talks to one node "
                "and would be redirected (MOVED) for the keys on the others; give it one "
                "Redis (its keys are ready for a cluster, its client is not: "
                "docs/deployment.md)")
    return None


def evicting_redis(info: dict[str, Any]) -> str | None:
    """A note when the Redis may evict keys: with ``maxmemory`` set and any policy but
    ``noeviction`` it drops keys under memory pressure, and the shop's keys are not a
    cache. An evicted lock key lets a second buyer into the section (two holders, the
    oversell the safe strategies exist to prevent: an eviction audit oversold token,
    fair and multi under ``volatile-lru``, which evicts only keys with a TTL, the
    locks), an evicted fencing counter starts the tokens again at 1, an evicted stock
    key costs a reload of the sale and its hold-off (``saleinfo.stock_key_lost``; it
    once left the sale refusing everyone), as does one of an ``atomic-sharded`` shard's
    two keys lost alone; a shard that lost both stops its sale until an admin reset
    (a reset's new shards, written after its copy, look the same to a buyer)."""
    policy = str(info.get("maxmemory_policy", "noeviction"))
    if int(info.get("maxmemory", 0) or 0) > 0 and policy != "noeviction":
        return (f"maxmemory-policy is {policy}: under memory pressure this Redis evicts "
                "the sale's keys (a lock key evicted admits two holders, an oversell; a "
                "stock key evicted costs a reload; an atomic-sharded shard's two keys "
                "evicted stop its sale): set maxmemory-policy noeviction, or no "
                "maxmemory")
    return None


def snapshot_redis(info: dict[str, Any]) -> str | None:
    """A note when the Redis persists by RDB snapshots alone (``save`` set, no
    ``appendonly``): after a crash it comes back with the stock of its last snapshot,
    more than the database has left, and the sale goes on from there: a lock path
    oversold it (a Redis audit: 26 oversold, ``token`` and ``atomic`` alike; the
    generations catch a snapshot from before a reset, not one from the same sale). Now
    the restart's new replication history has every sale reloaded from the database
    (``redishistory.py``), all but a purchase under way at the crash; and a lock sale
    holds off one lock TTL. One that comes back empty is reloaded from the database too,
    and one that logs every write (``appendfsync always``) comes back as it was."""
    save = str(info.get("config_save", "") or "").strip()
    fsync = str(info.get("config_appendfsync", "always"))
    if str(info.get("config_appendonly", "no")) == "yes":
        if fsync == "always":
            return None
        return (f"its append-only file is synced {fsync!r}, not 'always': a crash loses "
                "the last writes (up to a second's with everysec), and it comes back with "
                "a stock ahead of the database: the shop reloads every sale from the "
                "database when it sees the restart, but a purchase under way may sell "
                "from the old stock. Set appendfsync always, or no persistence at all")
    if not save:
        return None
    return (f"it saves RDB snapshots (save {save}) and no append-only file: after a "
            "crash it comes back with the stock of its last snapshot, ahead of the "
            "database; the shop reloads every sale from the database when it sees the "
            "restart, but a purchase under way may sell from the old stock: set "
            "appendonly yes with appendfsync always, or save \"\" (back empty, the sale "
            "is reloaded from the database)")


def reachable_redis(url: str) -> list[str]:
    """``REDIS_URL`` answers a PING in time and can hold the sale, or ``StartupError``
    naming it; the notes on it that do not stop the shop starting (eviction, snapshots),
    from the same ``INFO`` (and ``CONFIG GET``)."""
    problem = _redis_problem(url)
    if problem is not None:
        raise StartupError(f"REDIS_URL {settings.without_password(url)}: cannot reach it "
                           f"({problem})")
    info = _redis_info(url)
    unfit = unfit_redis(info)
    if unfit is not None:
        raise StartupError(f"REDIS_URL {settings.without_password(url)}: {unfit}")
    return [f"REDIS_URL {settings.without_password(url)}: {note}"
            for note in (evicting_redis(info), snapshot_redis(info), replicated_redis(info))
            if note]


def replicated_redis(info: dict[str, Any]) -> str | None:
    """A note when the primary has replicas: the shop does not follow a failover, and
    what the old primary sold after the promotion is lost with the writes it took (a
    Redis HA audit: a Sentinel failover, 63 units oversold; now reloaded from the
    database, ``redishistory.py``). serve said nothing of it, while it noted snapshots
    and eviction, the other ways a Redis comes back with old data."""
    replicas = int(info.get("connected_slaves", 0) or 0)
    if info.get("role") != "master" or replicas < 1:
        return None
    return (f"it has {replicas} replica{'s' if replicas > 1 else ''}: the shop does not "
            "follow a failover (restart it with the new primary's address); a promoted "
            "replica's sales are reloaded from the database before they sell, all but a "
            "purchase under way at the failover (docs/deployment.md, \"The shop's "
            "Redis\")")


def without_gunicorn_args(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without ``GUNICORN_CMD_ARGS``: the served gunicorn's options are the
    shop's own (``gunicorn_conf.py``); the user's would override them, ``--daemon`` too."""
    return {name: value for name, value in environ.items() if name != "GUNICORN_CMD_ARGS"}


def ignored_gunicorn_args() -> list[str]:
    """A note when the environment sets ``GUNICORN_CMD_ARGS``, which serve leaves out."""
    if not os.environ.get("GUNICORN_CMD_ARGS"):
        return []
    return ["GUNICORN_CMD_ARGS is ignored: seckill serve sets gunicorn's options itself "
            "(webapp/gunicorn_conf.py); to serve with your own, run gunicorn as "
            "docs/deployment.md shows"]


def few_redlock_nodes(redlock_urls: list[str] | None) -> list[str]:
    """A note when ``REDLOCK_URLS`` names fewer than three nodes: served as asked (a lab
    may want it), but a majority of one or two is every node, so RedLock then outlives
    no node's loss, which is all it is for (two nodes were served without a word)."""
    count = len(redlock_urls or [])
    if not 0 < count < 3:
        return []
    return [f"REDLOCK_URLS names {count} node{'s' if count > 1 else ''}: a majority of "
            f"{count} is every one, so redlock purchases are refused (503) while any is "
            "down; RedLock outlives a minority's loss from three nodes on (five by default)"]


def unreachable_lock_servers(redlock_urls: list[str] | None,
                             zookeeper_hosts: str | None) -> list[str]:
    """Notes on the lock servers that do not answer now: not refused (RedLock outlives a
    minority of its nodes, and a lab may start them later), but the redlock and
    zookeeper sales would be refused (503) with nothing said where the shop started."""
    notes = []
    nodes = redlock_urls or []
    # each with what it answered: a wrong password or db index answers, with an error
    # (all were "do not answer"; a CLI audit)
    problems = {u: _redis_problem(u, NOTE_TIMEOUT_S) for u in nodes}
    down = [(u, why) for u, why in problems.items() if why is not None]
    if down:
        fate = ("redlock purchases are refused (503) until a majority answers"
                if len(nodes) - len(down) <= len(nodes) // 2
                else "redlock still has a majority")
        shown = "; ".join(f"{settings.without_password(u)}: {why}" for u, why in down)
        notes.append(f"REDLOCK_URLS: {len(down)} of {len(nodes)} nodes cannot be used "
                     f"({shown}): {fate}")
    if zookeeper_hosts:
        try:
            import kazoo.hosts  # noqa: F401 - ``any_answers`` reads the string with it
        except ImportError:  # no kazoo: the zookeeper strategy says so itself
            return notes
        if not any_answers(zookeeper_hosts, NOTE_TIMEOUT_S):
            notes.append(f"ZOOKEEPER_HOSTS: no server answers at {zookeeper_hosts}: "
                         "zookeeper purchases are refused (503) until one does")
    return notes


def reachable_database(url: str) -> None:
    """A database server named by ``DATABASE_URL`` lets us connect in time, or
    ``StartupError`` naming it (SQLite is a file: nothing to reach)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    if make_url(settings.database_url(url)).get_backend_name() == "sqlite":
        try:  # a file: nothing to reach; in memory: nothing the workers could share
            settings.check_served_database({"DATABASE_URL": url})
        except settings.ConfigError as exc:
            raise StartupError(str(exc)) from None
        usable_sqlite_file(url)
        return
    engine = db.scratch_engine(url)
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as exc:
        raise StartupError(f"DATABASE_URL {settings.without_password(url)}: cannot connect "
                           f"({_first_line(exc)})") from None
    finally:
        engine.dispose()


def usable_sqlite_file(url: str) -> None:
    """The file of a SQLite ``DATABASE_URL`` opens as a database (made, with its folder,
    if missing, as the migrations would), or ``StartupError`` naming it: a folder that
    cannot be made, a folder given for the file, a file that is not a database were
    "could not start: FileNotFoundError: ..." and the like, naming no setting."""
    import sqlite3

    database_url = settings.database_url(url)
    path = db.sqlite_file(database_url)
    if path is None or path.startswith("file:"):  # a URI: the driver's to read
        return
    try:
        db.sqlite_file(database_url, make_folder=True)
        with contextlib.closing(sqlite3.connect(path, timeout=0)) as connection:
            # reads only: a new file stays empty, for the migrations' page size
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except (OSError, sqlite3.Error) as exc:
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return  # another process writes it (a serve migrating): a database, and
            # the migration lock waits for it
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StartupError(f"DATABASE_URL {url}: cannot use {path} as a SQLite database "
                           f"({reason})") from None


def netloc(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets (``[::1]:8000``), as URLs and
    gunicorn's ``--bind`` want it (``::1:8000`` was "'' is not a valid port number")."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_family(host: str) -> socket.AddressFamily:
    """The address family gunicorn binds ``host`` with: IPv6 for an IPv6 address, IPv4
    for anything else, a host name included (gunicorn's ``sock._sock_type``). So
    ``localhost`` is served on 127.0.0.1 even where /etc/hosts lists ::1 first."""
    try:
        socket.inet_pton(socket.AF_INET6, host)
    except (OSError, ValueError):
        return socket.AF_INET
    return socket.AF_INET6


def _bind_probe(host: str, port: int) -> int:
    """Bind ``host:port`` as gunicorn will (its family, ``SO_REUSEADDR``) and let go;
    the port bound (``port`` 0: one the kernel found free there), or ``StartupError``."""
    family = bind_family(host)
    try:
        infos = socket.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise StartupError(f"cannot serve on {host}:{port}: {exc}") from None
    _, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            hint = " (is another server running there?)" if exc.errno == errno.EADDRINUSE \
                else ""
            raise StartupError(f"cannot serve on {netloc(host, port)}: "
                               f"{exc.strerror or exc}{hint}") from None
        return int(probe.getsockname()[1])


def check_port_free(host: str, port: int) -> None:
    """Raise ``StartupError`` if something listens on ``host:port`` already, where
    gunicorn will bind it. Checked before starting, so that the answer is a clear one
    and nothing was started in vain. (A server that takes the port meanwhile is caught
    by the health check, which knows its own gunicorn's answer.)"""
    _bind_probe(host, port)


def free_port_on(host: str) -> int:
    """A port nobody listens on at ``host`` right now, as gunicorn will bind it: a port
    free on 127.0.0.1 (``free_port``) may be taken on another address (``--port 0
    --host 0.0.0.0``: gunicorn failed to bind it)."""
    return _bind_probe(host, 0)


def _the_exception(lines: list[str]) -> str:
    """The log's last line that is no gunicorn status line ("[date] [pid] [INFO] ...",
    "Reason: Worker failed to boot." after a worker's traceback) and no traceback frame:
    the exception itself. The log's last line if there is none."""
    for line in reversed(lines):
        if line.strip() and not line.startswith(("[", " ", "\t", "Traceback")):
            return line.strip()
    return next((line.strip() for line in reversed(lines) if line.strip()), "no log")


def absolute_sqlite(url: str) -> str:
    """A SQLite URL with a relative path made absolute (from the working dir it was given
    in): gunicorn's workers run in a scratch dir."""
    from sqlalchemy.engine import make_url

    name = db.sqlite_file(url)
    if name is None or name.startswith("file:") or os.path.isabs(name):
        return url
    return make_url(url).set(database=os.path.abspath(name)).render_as_string(
        hide_password=False)


def own_log(path: Path, stack: contextlib.ExitStack) -> Path:
    """``path`` unless another shop writes it, else ``<name>-<pid>.log`` beside it (and
    ``-2``, ``-3``... after the pid for more shops of one process): the log this shop
    takes, held until ``stack`` closes by an ``flock`` on ``<log>.lock``, a file that
    rotation does not move.

    Two serves in one folder (each with its own ``DATABASE_URL``) wrote one
    ``seckill-serve.log``: the one that moved it aside signalled only its own gunicorn,
    so the other wrote on into the moved file, then into a removed one, and two moving
    it at once raised ``FileNotFoundError`` out of serve's loop (a serve audit)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        tag = "" if n == 1 else f"-{os.getpid()}" if n == 2 else f"-{os.getpid()}-{n - 1}"
        candidate = path.with_name(f"{path.stem}{tag}{path.suffix}")
        fd = os.open(f"{candidate}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another shop's
            os.close(fd)
            continue
        stack.callback(os.close, fd)  # the flock goes with it, and with this process
        if tag:  # a name only this process uses: nothing left of it once done with
            stack.callback(_drop_if_empty, candidate)
            stack.callback(Path(f"{candidate}.lock").unlink, missing_ok=True)
        return candidate
    raise AssertionError("unreachable")


def _drop_if_empty(log: Path) -> None:
    """Remove ``log`` if nothing was written to it (a pid-named log nobody needs)."""
    with contextlib.suppress(OSError):
        if log.stat().st_size == 0:
            log.unlink()


class ServedApp:
    """The shop served by gunicorn; ``url``, ``admin_token``, ``redis_url``,
    ``redlock_urls``, ``database_url`` and ``pid`` (gunicorn's master) once started.

    :param env: extra environment for gunicorn, e.g. ``{"LOCK_TIMEOUT_S": "10"}``.
    :param seed: create the demo products and restock their sales.
    :param startup_timeout: how long gunicorn has to answer ``/healthz``; None: 60 s and
        2 s a worker (64 workers on a loaded 2-core machine took 72 s: the fixed 60 s
        said "did not become healthy", a CLI audit).
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, workers: int = 2,
                 redis_url: str | None = None, database_url: str | None = None,
                 redlock_urls: list[str] | None = None, zookeeper_hosts: str | None = None,
                 env: dict[str, str] | None = None, seed: bool = True,
                 startup_timeout: float | None = None, log_path: Path | None = None
                 ) -> None:
        self.host, self.port, self.workers = host, port or free_port(), workers
        self._port_picked = port is None  # picked again once the Redis servers hold theirs
        self.redis_url, self.database_url = redis_url, database_url
        self.redlock_urls, self.zookeeper_hosts = redlock_urls, zookeeper_hosts
        self.env = dict(env or {})
        #: the last answer other than 200 from our gunicorn's /healthz, for the error
        self._last_health = ""
        self.admin_token = (self.env.get("SECKILL_ADMIN_TOKEN")
                            or os.environ.get("SECKILL_ADMIN_TOKEN") or secrets.token_urlsafe(18))
        self.seed = seed
        self.startup_timeout = (60.0 + 2.0 * workers if startup_timeout is None
                                else startup_timeout)
        #: what this shop's ``/healthz`` answers in ``config.SERVE_ID_HEADER``: the health check
        #: knows its own gunicorn from a server that already answered at the URL
        self.serve_id = secrets.token_urlsafe(12)
        #: the log asked for, and the one written: ``log_path`` unless another shop
        #: writes it (``own_log``), from ``start`` on. Absolute: gunicorn runs in the
        #: scratch dir, and took a relative one from there (``showdown --report
        #: reports/demo``, what ``make demo`` runs: gunicorn never came up; a CLI audit)
        self.log_wanted = self.log_path = None if log_path is None else log_path.absolute()
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir: Path | None = None
        #: the Redis servers started here (none for a REDIS_URL or REDLOCK_URLS given)
        self.embedded: list[RedisServer] = []
        #: what ``seckill serve`` notes about a REDIS_URL given (``reachable_redis``)
        self.redis_notes: list[str] = []
        #: the offset in ``logfile`` where this run's gunicorn began to write
        self._log_start = 0
        self._stack = contextlib.ExitStack()

    @property
    def redis_is_ours(self) -> bool:
        """Whether the shop's Redis is one this shop started (no ``REDIS_URL`` given)."""
        return any(server.url == self.redis_url for server in self.embedded)

    def gone_redis(self) -> list[RedisServer]:
        """The embedded Redis servers whose process has exited (killed, out of memory)."""
        return [r for r in self.embedded if r.proc is not None and r.proc.poll() is not None]

    @property
    def url(self) -> str:
        """Where a browser on this machine finds the shop: a wildcard bind (``0.0.0.0``,
        ``::``) is reached on loopback; an IPv6 address goes in brackets."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        return f"http://{netloc(host, self.port)}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def logfile(self) -> Path:
        """gunicorn's and the shop's log: ``log_path`` (appended to, kept), else a file
        in the scratch dir, removed with it."""
        if self.log_path is not None:
            return self.log_path
        assert self.workdir is not None
        return self.workdir / "gunicorn.log"

    def rotate_log(self, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS) -> bool:
        """Once the log has ``max_bytes``, move it to ``<log>.1`` (``.1`` to ``.2``...,
        ``backups`` kept) and have gunicorn reopen it (SIGUSR1: the master and each
        worker reopen their log and point stdout and stderr at the new file), as
        logrotate does. True if it did. ``seckill serve`` calls it twice a second.

        The kept log was appended to and never rotated: a fault audit found it at 42 MB
        after 15 minutes. Lines written between the move and the reopen go to ``.1``;
        none is lost. One process moves the files: gunicorn's workers, each rotating
        its own handler, would move each other's files."""
        log = self.logfile
        try:
            if log.stat().st_size < max_bytes:
                return False
        except FileNotFoundError:
            return False
        for n in range(backups - 1, 0, -1):
            older = log.with_name(f"{log.name}.{n}")
            if older.exists():
                older.replace(log.with_name(f"{log.name}.{n + 1}"))
        log.replace(log.with_name(f"{log.name}.1"))
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
        return True

    def start(self) -> ServedApp:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _seed(self) -> None:
        """The demo products; a restart's sales reloaded into an empty Redis get their
        locks' fencing counters raised past their orders' tokens, on the backends the
        workers will lock on."""
        featured = self.env.get("LOCK_STRATEGY") or os.environ.get("LOCK_STRATEGY")
        assert self.workdir is not None and self.redis_url and self.database_url
        backends = Backends({**settings.from_env(str(self.workdir)),
                             "REDIS_URL": self.redis_url, "DATABASE_URL": self.database_url,
                             "REDLOCK_URLS": list(self.redlock_urls or []),
                             "ZOOKEEPER_HOSTS": self.zookeeper_hosts})
        try:
            demo.seed(self.database_url, self.redis_url, featured_strategy=featured,
                      fence=functools.partial(locks.raise_fence, backends, hold=False),
                      fresh_redis=self.redis_is_ours)
        finally:
            backends.close()

    def _start(self) -> None:
        if not self._port_picked:  # the caller's port: refused before anything starts
            check_port_free(self.host, self.port)
        self.workdir = Path(tempfile.mkdtemp(prefix="seckill-serve-"))
        _live.add(self)  # from here on, the exit hook stops what is started and cleans up
        if self.database_url is not None:  # (a scratch SQLite file is this shop's alone)
            self.database_url = absolute_sqlite(self.database_url)
            # before the claim, which connects too: a server that never answers cost
            # two connect timeouts (24 s before "cannot connect"), now one (10 s)
            reachable_database(self.database_url)
            servers = servelock.Servers(self.redis_url, self.redlock_urls,
                                        self.zookeeper_hosts)
            try:  # one database, one set of lock servers: two would sell the stock twice
                self._stack.enter_context(servelock.claimed(self.database_url, servers))
            except servelock.DatabaseInUse as exc:
                raise StartupError(str(exc)) from None
            except Exception:  # not reachable since the check: say so; else as it is
                reachable_database(self.database_url)  # (served unclaimed, it was lost)
                raise
        if self.redis_url is None:
            shop_redis = self._stack.enter_context(EmbeddedRedis(1))
            self.embedded += shop_redis.servers
            self.redis_url = shop_redis.urls[0]
        else:
            self.redis_notes = reachable_redis(self.redis_url)
        if self.redlock_urls is None:
            redlock = self._stack.enter_context(EmbeddedRedis(5))
            self.embedded += redlock.servers
            self.redlock_urls = redlock.urls
        if self._port_picked:  # a port picked before they started may now be one of theirs
            self.port = free_port_on(self.host)  # free where gunicorn binds, not just on 127.0.0.1
        if self.database_url is None:  # a scratch file of our own: nothing to reach
            self.database_url = f"sqlite:///{self.workdir / 'seckill.sqlite'}"
        self._claim_redis()  # before the seed writes its sales there
        with db.migration_lock(self.database_url):  # another serve may be starting too
            db.upgrade(self.database_url)
            if self.seed:
                self._seed()
        # not GUNICORN_CMD_ARGS: gunicorn reads it over its config file, and a --daemon
        # there left a shop nobody stopped, holding the port (a CLI audit)
        env = {**without_gunicorn_args(os.environ), **self.env, "REDIS_URL": self.redis_url,
               "DATABASE_URL": self.database_url, "REDLOCK_URLS": ",".join(self.redlock_urls),
               "SECKILL_ADMIN_TOKEN": self.admin_token, "SECKILL_SERVE_ID": self.serve_id}
        if self.zookeeper_hosts:
            env["ZOOKEEPER_HOSTS"] = self.zookeeper_hosts
        if self.log_wanted is not None:  # a kept log is this shop's alone
            self.log_path = own_log(self.log_wanted, self._stack)
        config = str(resources.files("webapp").joinpath("gunicorn_conf.py"))
        # run in the scratch dir: ``-m`` and gunicorn's ``chdir`` put the working dir
        # first on sys.path, and a ``webapp/`` or ``lockcore/`` folder where the user
        # typed the command was imported instead of the installed shop
        # gunicorn writes the log itself (``--capture-output``: stdout and stderr too),
        # so that it can reopen it when ``rotate_log`` moved it
        cmd = [sys.executable, "-m", "gunicorn", "-c", config, "--chdir", str(self.workdir),
               "--bind", netloc(self.host, self.port), "--workers", str(self.workers),
               "--error-logfile", str(self.logfile), "--capture-output"]
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        self.rotate_log()  # a kept log already full: a fresh one for this run
        with open(self.logfile, "ab" if self.log_path is not None else "wb") as log:
            # where this run's lines start: a kept log holds earlier runs' too, and a
            # start-up failure quoted one of those (a CLI audit)
            self._log_start = log.tell()
            self.proc = subprocess.Popen(tied_to_parent(cmd), env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=self.workdir)
        self._wait_healthy()

    def _claim_redis(self) -> None:
        """A Redis given to this shop (not one it started) holds the sales of its
        database alone: another live shop there selling from another database refuses
        this one (``redisclaim``)."""
        import redis

        assert self.redis_url is not None and self.database_url is not None
        if self.redis_is_ours:
            return
        try:
            self._stack.enter_context(redisclaim.claimed(
                self.redis_url, redisclaim.database_identity(self.database_url)))
        except servelock.DatabaseInUse as exc:
            raise StartupError(str(exc)) from None
        except redis.RedisError as exc:
            raise StartupError(f"REDIS_URL {settings.without_password(self.redis_url)}: "
                               f"{_first_line(exc)}") from None

    def _wait_healthy(self) -> None:
        """Until our gunicorn answers ``/healthz`` with 200. An answer without our
        ``serve_id`` is another server's, holding the URL (a port taken after the
        check, ``localhost`` reaching [::1] where gunicorn serves 127.0.0.1): taken for
        ours, it had the banner print an admin token that server does not accept."""
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise StartupError(self._unhealthy())
            header = settings.SERVE_ID_HEADER
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as response:
                    status, serve_id = response.status, response.headers.get(header)
            except urllib.error.HTTPError as exc:  # a 503 (Redis not ready), or not ours
                status, serve_id = exc.code, exc.headers.get(header)
                with contextlib.suppress(Exception):  # a body cut short: the status
                    self._last_health = f"HTTP {exc.code} {exc.read(300).decode(errors='replace')}"
                exc.close()
            except OSError:  # nobody answers yet
                status = None
            if status is not None and serve_id != self.serve_id:
                raise StartupError(f"another server answers at {self.url} (HTTP {status} "
                                   "for /healthz, not the shop started here): is another "
                                   "server running there?")
            if status == 200:
                return
            time.sleep(0.1)

    def _unhealthy(self) -> str:
        """Why gunicorn did not come up, in one line (the log's last: the exception),
        then the log's last lines, whole (2,000 characters began mid-word) unless the
        log is kept (``log_path``), where it is named instead."""
        with open(self.logfile, "rb") as log:
            log.seek(self._log_start)
            lines = log.read().decode(errors="replace").splitlines()
        last = _the_exception(lines)
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            why = f"gunicorn exited ({code}) before it answered at {self.url}: {last}"
        else:
            # what it answered, too: a Redis user refused the shop's keys answered 503
            # "down: NoPermissionError" all along, and this said "no log" (a Redis audit)
            said = (f"; it answered {self._last_health.strip()}"
                    if self._last_health else "")
            why = (f"gunicorn did not answer {self.url}/healthz with 200 within "
                   f"{self.startup_timeout:g} s{said}: {last}")
        if self.log_path is not None:
            return f"{why} (the whole log: {self.log_path})"
        return why + "\n" + "\n".join(lines[-20:])

    def stop(self) -> None:
        """Stop gunicorn, the servers started for it, and remove the scratch dir.

        The app stays in ``_live`` until all of that is done: a Ctrl-C that cuts this
        short leaves the rest to the exit hook, which calls ``stop`` again.
        """
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # gunicorn master stops its workers
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the session we started it in
                proc.wait(timeout=5)
        self.proc = None
        self._stack.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        _live.discard(self)

    def __enter__(self) -> ServedApp:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for app in list(_live):
        app.stop()
