"""The app's connections: one SQLAlchemy engine and the Redis/ZooKeeper clients.

Plain SQLAlchemy and redis-py, made per app (``app.extensions["seckill"]``), lazily,
so each gunicorn worker opens its own after the fork.

* Redis: a ``BlockingConnectionPool``. redis-py's default pool raises "Too many
  connections" once its limit is reached; under a 1000-buyer spike the blocking pool
  makes a request wait for a free connection (up to a timeout, then 503) instead.
* SQLite: WAL (readers never block the writer) and a busy timeout, so concurrent
  writers from two workers queue for the write lock instead of failing.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

from flask import current_app
from redis import BlockingConnectionPool, Redis
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from lockcore.strategies.zookeeper_clients import reconnect_retry

from . import config as settings
from .batching import gevent_patched
from .cohort import Cohorts
from .db import PG_STATEMENT_TIMEOUT_MS, connect_args, sqlite_file_layout
from .logthrottle import quiet_kazoo
from .pipelining import ScriptPipeline
from .problems import Busy
from .redishistory import HistoryWatch
from .takenorders import write_taken
from .writedeadline import keep_deadlines

logger = logging.getLogger(__name__)

#: how long the first zookeeper request waits for the session (later ones do not wait)
ZK_FIRST_CONNECT_S = 5.0

#: how long a product view waits for Redis's live stock (``Backends.view_redis``)
VIEW_REDIS_TIMEOUT_S = 2.0
#: and for a connection of its pool
VIEW_POOL_WAIT_S = 0.1


def _bounded(pool: Any, timeout_s: float) -> None:
    """Give ``pool``'s connections ``timeout_s`` to connect and to answer, whatever
    ``REDIS_URL`` asks: ``from_url`` lets its query string win over the arguments
    (``?socket_timeout=10`` gave the views 10 s again; a review)."""
    pool.connection_kwargs.update(socket_timeout=timeout_s, socket_connect_timeout=timeout_s)

#: How long a SQLite statement waits for another writer (the file's one write lock).
#: It waits in C, not in gevent: the whole worker stops meanwhile. And a lock section
#: writes its order rows inside the lock, whose TTL (``LOCK_TTL_MS``, 10 s) the wait
#: must leave room in. At 20 s (a storefront audit, another process holding the file's
#: write lock) purchases answered after 20-40 s, past the page's "no answer" (36 s by
#: default: ``shop.purchase_timeout_s``), and
#: a section's write outlived its lock (a review: a reset took the lock meanwhile).
#: A writer of this shop holds the lock for one batch's commit, milliseconds.
SQLITE_BUSY_TIMEOUT_S = 5
#: how long a purchase waits for one of the engine's connections (PostgreSQL's too)
POOL_TIMEOUT_S = 10
#: WAL pages between checkpoints (SQLite's default 1,000). A checkpoint writes each
#: distinct page back once, and the orders' random index pages recur in the WAL: ten
#: times fewer checkpoints, each writing not many more pages: an order 1-3 us cheaper,
#: but the commit that runs a checkpoint takes 20-30 ms, not 7-11, and a gevent worker
#: runs nothing else meanwhile (``python -m loadtest.bench.orderwrites``;
#: docs/performance.md, session 12). At 2 KB pages, a WAL of about 20 MB.
SQLITE_CHECKPOINT_PAGES = 10_000


def make_engine(url: str) -> Engine:
    url = settings.database_url(url)  # postgres:// and a bare postgresql:// mean psycopg 3
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S,
                                                  "check_same_thread": False},
                               pool_size=10, max_overflow=20, pool_timeout=POOL_TIMEOUT_S,
                               hide_parameters=True)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, record: Any) -> None:
            cursor = dbapi_connection.cursor()
            sqlite_file_layout(cursor)  # before WAL mode, which writes a new file's header
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_S * 1000}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_CHECKPOINT_PAGES}")
            cursor.close()

        return engine
    serving = connect_args(url, serving=True)
    # every order write of a sale updates its one ``sales`` row: under READ COMMITTED
    # the second of two at once waits and updates what the first committed; a database
    # whose default is repeatable read or serializable failed it ("could not serialize
    # access": 503s with units unsold, a PostgreSQL audit). No round trip: psycopg puts
    # the level in its BEGIN.
    parsed = make_url(url)
    isolation = ({"isolation_level": "READ COMMITTED"}
                 if parsed.get_backend_name() == "postgresql" else {})
    # hide_parameters: a database error's text, which the log keeps, carried the buyers'
    # ids and Idempotency-Keys of its statement (an operator audit)
    engine = create_engine(url, pool_size=5, max_overflow=10, pool_timeout=POOL_TIMEOUT_S,
                           pool_pre_ping=True, connect_args=serving, hide_parameters=True,
                           **isolation)
    if engine.dialect.name == "postgresql":  # an order write's budget (writedeadline.py)
        # the shop's own statement timeout, or the URL's (asked per connection)
        keep_deadlines(engine, PG_STATEMENT_TIMEOUT_MS if "options" in serving else None)
        durable = "synchronous_commit" not in str(parsed.query.get("options", ""))
        event.listen(engine, "connect", functools.partial(_session_settings, durable=durable))
        event.listen(engine, "handle_error", _read_only_renews_the_pool)
    return engine


def _read_only_renews_the_pool(context: Any) -> None:
    """A statement refused for a read-only transaction: the pool's connections are
    dropped, as after a lost connection, and the next are opened afresh. A database set
    read-only (``ALTER DATABASE ... SET default_transaction_read_only``) gives the
    setting to each connection when it opens: flipped back, the pooled ones kept it, and
    every purchase was 503 "refused" and ``/healthz`` "read-only" for as long as they
    lived, 80 s and more (a PostgreSQL audit). A hot standby promoted is the same.

    At most once every ``READ_ONLY_RENEW_S``: each refusal dropped the pool, and a
    database read-only for good cost a new connection per request (a review)."""
    error = context.original_exception
    code = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)  # psycopg2
    if code == READ_ONLY_SQLSTATE and read_only_renewal_due():
        context.is_disconnect = True


def read_only_renewal_due() -> bool:
    """Whether the pool may be renewed for a read-only database now (at most once every
    ``READ_ONLY_RENEW_S``, this process's refusals and ``/healthz`` together)."""
    now = time.monotonic()
    if now - _read_only_renewed[0] < READ_ONLY_RENEW_S:
        return False
    _read_only_renewed[0] = now
    return True


#: PostgreSQL's read_only_sql_transaction
READ_ONLY_SQLSTATE = "25006"
#: how often a read-only refusal may drop the pool's connections
READ_ONLY_RENEW_S = 1.0
#: when it last did (this process's)
_read_only_renewed = [float("-inf")]


#: ISO output for a database whose ``DateStyle`` is another (the input order is kept);
#: ``synchronous_commit = off`` (the database's or the role's) back to the default
_ISO_DATES = ("CASE WHEN current_setting('DateStyle') NOT LIKE 'ISO,%' "
              "THEN set_config('DateStyle', 'ISO', false) END")
_DURABLE = ("CASE WHEN current_setting('synchronous_commit') = 'off' "
            "THEN set_config('synchronous_commit', 'on', false) END")


def _session_settings(dbapi_connection: Any, record: Any, *, durable: bool = True) -> None:
    """A new PostgreSQL connection of the shop's, in one statement when it opens:

    * **dates psycopg can read.** It reads a ``timestamptz`` in the ISO style only: on a
      database whose ``DateStyle`` is ``SQL, DMY`` the shop could not start
      ("NotImplementedError: can't parse timestamptz").
    * **a COMMIT on disk before it returns** (unless ``durable`` is False: the URL's
      ``options=`` sets ``synchronous_commit`` itself, and is taken at its word).

    With ``synchronous_commit = off`` set on the database (a common tuning), a crash in
    the middle of a sale lost orders whose buyers had heard 201: 19, 17 and 6 of them
    for ``atomic``, ``token`` and ``sql`` (a PostgreSQL audit), and the units they took
    stayed sold in Redis. Only ``off`` is raised: ``local`` is durable here, and
    ``remote_write``/``remote_apply`` are stronger than the default."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"SELECT {_ISO_DATES}" + (f", {_DURABLE}" if durable else ""))
    finally:
        cursor.close()
        dbapi_connection.commit()  # a SET in a transaction rolled back would be undone


def _semaphore(size: int) -> Any:
    if gevent_patched("socket"):
        from gevent.lock import BoundedSemaphore

        return BoundedSemaphore(size)
    return threading.BoundedSemaphore(size)


class Backends:
    """Everything a request talks to, built on first use."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    @functools.cached_property
    def engine(self) -> Engine:
        return make_engine(self.config["DATABASE_URL"])

    @functools.cached_property
    def sessions(self) -> sessionmaker[Session]:
        return sessionmaker(self.engine, expire_on_commit=False)

    @functools.cached_property
    def purchase_slots(self) -> Any:
        """A BoundedSemaphore, made after the fork. In a gevent worker it is gevent's
        own: monkey-patching leaves ``threading.BoundedSemaphore`` the pure-Python one,
        a ``Condition`` over patched locks, which cost 5% of a worker's CPU in a
        ``token`` run's profile (docs/performance.md, session 4)."""
        return _semaphore(self.config["PURCHASE_CONCURRENCY"])

    @functools.cached_property
    def combined_slots(self) -> Any:
        """``purchase_slots`` for the buyers of a combined lock (``LOCK_COMBINE``): as many
        as one combined section serves (``LOCK_COMBINE_MAX_BATCH``). They wait in their
        worker's queue, not on the lock, so more of them cost the lock nothing; fewer
        made smaller sections (docs/performance.md, session 7)."""
        return _semaphore(self.config["LOCK_COMBINE_MAX_BATCH"])

    @functools.cached_property
    def cohorts(self) -> Cohorts:
        """This worker's local queues in front of the safe locks (``LOCK_COHORT``)."""
        return Cohorts(self.config["LOCK_COHORT_MAX_PASSES"],
                       self.config["LOCK_COHORT_MAX_MS"] / 1000)

    @functools.cached_property
    def redis(self) -> Redis:
        """redis-py's default connection class on purpose. Its check of every connection
        taken from the pool (``can_read``: a zero-timeout ``select.poll``) is, in a gevent
        worker, gevent's ``poll``, which costs ~44 us more than the system call *and yields
        to the hub*. A connection class checking with the system call was measured in
        session 6 (docs/performance.md): ``token`` sold 10-20% less in each of four
        showdown pairs, its combined sections smaller (5.5 Redis commands a purchase
        against 4.4): the yields let buyers queue while a section runs. An explicit
        ``sleep(0)`` before the combiner takes its batch brought the count back (4.5) but
        not the rate, so that is not the whole story; not understood further."""
        pool = BlockingConnectionPool.from_url(
            self.config["REDIS_URL"], max_connections=self.config["REDIS_MAX_CONNECTIONS"],
            timeout=self.config["REDIS_POOL_TIMEOUT_S"], socket_connect_timeout=2,
            socket_timeout=self.config["REDIS_SOCKET_TIMEOUT_S"], health_check_interval=30)
        make = pool.make_connection

        def make_connection() -> Any:  # every connection, before its first connect
            connection = make()
            connection.register_connect_callback(self._redis_connected)
            return connection

        pool.make_connection = make_connection  # type: ignore[method-assign]
        return Redis(connection_pool=pool)

    @functools.cached_property
    def history(self) -> HistoryWatch:
        """This worker's watch over its Redis's history (``redishistory.py``): a failover
        or a restart from a snapshot reloads the stale sales from the database. Each
        connection the purchases' pool makes is asked too, and refused if the history
        changed (``_redis_connected``)."""
        return HistoryWatch(self.redis, self.sessions)

    def _redis_connected(self, connection: Any) -> None:
        """Each (re)connection of the purchases' pool: the Redis behind the address may
        be another one now (a restart, a failover). A watch not made yet starts so."""
        watch = self.__dict__.get("history")
        if watch is not None:
            watch.reconnected(connection)

    @functools.cached_property
    def script_pipeline(self) -> ScriptPipeline | None:
        """This worker's auto-pipeline for purchase scripts (``REDIS_AUTOPIPELINE``);
        its leader also writes the order rows of the ``atomic`` purchases its batch took
        (``takenorders.py``)."""
        if not self.config["REDIS_AUTOPIPELINE"]:
            return None
        return ScriptPipeline(self.redis, after=write_taken)

    @functools.cached_property
    def view_redis(self) -> Redis:
        """The product views' client (``GET /``, ``/api/products``), its reads bounded
        by ``VIEW_REDIS_TIMEOUT_S``: past it a view shows the database's count. On the
        purchases' client a frozen Redis held the storefront and its every poll for
        ``REDIS_SOCKET_TIMEOUT_S`` (10 s; a storefront audit)."""
        timeout = min(VIEW_REDIS_TIMEOUT_S, self.config["REDIS_SOCKET_TIMEOUT_S"])
        # a full pool is not waited for either (it was, for REDIS_POOL_TIMEOUT_S: 6 views
        # on a pool of 2 of a frozen Redis waited 2, 2, 4, 4, 6, 6 s; a review)
        pool = BlockingConnectionPool.from_url(
            self.config["REDIS_URL"], max_connections=self.config["REDIS_MAX_CONNECTIONS"],
            timeout=VIEW_POOL_WAIT_S, health_check_interval=30)
        _bounded(pool, timeout)
        return Redis(connection_pool=pool)

    @functools.cached_property
    def health_redis(self) -> Redis:
        """A client of its own with short timeouts: a probe must answer while Redis hangs."""
        client = Redis.from_url(self.config["REDIS_URL"])
        _bounded(client.connection_pool, 1.0)
        return client

    @functools.cached_property
    def redlock(self) -> list[Redis]:
        urls = self.config["REDLOCK_URLS"]
        if not urls:
            raise Busy("the redlock strategy needs REDLOCK_URLS (five Redis servers)")
        return [Redis(connection_pool=BlockingConnectionPool.from_url(
                    url, max_connections=self.config["REDIS_MAX_CONNECTIONS"], timeout=5,
                    socket_connect_timeout=0.5, socket_timeout=0.5)) for url in urls]

    @functools.cached_property
    def zookeeper(self) -> Any:
        """One ZooKeeper session per worker, started once and never given up on.

        An unreachable ZooKeeper costs the first request ``ZK_FIRST_CONNECT_S``, not
        every request a connect timeout: the client keeps reconnecting in the background
        (at most ``RECONNECT_MAX_S`` apart: ``reconnect_retry``, not kazoo's hour), and
        until it is back lockcore refuses a zookeeper acquire at once, which the shop
        answers 503."""
        hosts = self.config["ZOOKEEPER_HOSTS"]
        if not hosts:
            raise Busy("the zookeeper strategy needs ZOOKEEPER_HOSTS")
        try:  # a sale left on zookeeper by a shop that had kazoo: 503, and a reset moves it
            from kazoo.client import KazooClient
        except ImportError:
            from .locks import KAZOO_MISSING  # (locks imports this module)

            raise Busy(KAZOO_MISSING) from None
        from kazoo.handlers.threading import SequentialThreadingHandler

        handler: Any = SequentialThreadingHandler()
        if gevent_patched("socket"):  # kazoo's threads would block the gevent hub
            from kazoo.handlers.gevent import SequentialGeventHandler

            handler = SequentialGeventHandler()
        quiet_kazoo()
        client = KazooClient(hosts=hosts, timeout=5, handler=handler,
                             connection_retry=reconnect_retry(handler.sleep_func))
        if not client.start_async().wait(ZK_FIRST_CONNECT_S):
            logger.warning("ZooKeeper at %s does not answer yet; zookeeper purchases answer "
                           "503 until it does", hosts)
        return client

    def close(self) -> None:
        redis_clients = [self.__dict__.get("redis"), self.__dict__.get("view_redis"),
                         self.__dict__.get("health_redis"),
                         *self.__dict__.get("redlock", [])]
        for client in filter(None, redis_clients):
            client.close()
            client.connection_pool.disconnect()  # a pool we passed in is not closed by close()
        zk = self.__dict__.get("zookeeper")
        if zk is not None:
            zk.stop()
            zk.close()
        engine = self.__dict__.get("engine")
        if engine is not None:
            engine.dispose()


def get_backends() -> Backends:
    """The current app's ``Backends`` (inside a request or app context)."""
    backends: Backends = current_app.extensions["seckill"]
    return backends
