"""Settings read from the environment once, when the app is built.

Defaults run the lab on one machine with nothing installed: SQLite in the instance
folder and a Redis on localhost (``seckill serve`` starts an embedded one and exports
``REDIS_URL``). ``docker compose`` sets the same variables to its services.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import urllib.parse
from typing import Any

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def _csv(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def redlock_urls() -> list[str]:
    """``REDLOCK_URLS`` as the shop reads it: comma-separated, spaces around a URL and
    empty items dropped; an empty list when unset or empty (the shop then embeds five
    nodes; spaces alone are empty too). :raises ConfigError: it holds commas and nothing
    else but spaces (``",,"`` was read as unset: five embedded nodes, where the user
    meant servers of their own)."""
    raw = os.environ.get("REDLOCK_URLS") or ""
    urls = _csv(raw)
    if raw.strip() and not urls:
        raise ConfigError(f"REDLOCK_URLS: {raw!r} names no Redis URL (comma-separated "
                          "redis://host:port/0 URLs; unset, five embedded nodes)")
    return urls


def zookeeper_hosts() -> str | None:
    """``ZOOKEEPER_HOSTS`` as the shop reads it, None when unset or empty; the one
    reading the workers, ``seckill serve``'s notes and its database claim share (an
    undocumented ``ZK_HOSTS`` alias reached the workers alone: a shop locking on
    ZooKeeper started with no note that nothing answered there)."""
    return os.environ.get("ZOOKEEPER_HOSTS") or None


_OFF = ("", "0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


def _flag(name: str, default: str) -> bool:
    """``name`` from the environment, on or off. Anything else is a ConfigError: every
    word but the off ones meant on, so ``SECKILL_LOCK_COHORT=disabled`` turned it on (a
    CLI audit)."""
    text = os.environ.get(name, default)
    value = text.strip().lower()
    if value not in _OFF + _ON:
        raise ConfigError(f"{name} must be 1, true, yes or on, or 0, false, no or off; "
                          f"got {text!r}")
    return value in _ON


def without_password(url: str) -> str:
    """``url`` fit to print or log: a password in it becomes ``***``, in its user part
    or as a ``password=`` query parameter (redis-py's form for a Unix socket,
    ``unix:///run/redis.sock?password=...``, and a libpq keyword)."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password is not None:
            userinfo, host = parts.netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            url = urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
        # in the text itself: urlunsplit drops a socket URL's empty host (unix:///...)
        base, mark, query = url.partition("?")
        return base + mark + re.sub(r"(^|&)password=[^&#]*", r"\1password=***", query)
    except ValueError:  # not a URL urllib reads: say so rather than print it
        return "<a URL that does not parse>"


def database_url(url: str) -> str:
    """``DATABASE_URL`` as SQLAlchemy needs it. ``postgres://`` (Heroku's and many hosts'
    spelling) is no SQLAlchemy scheme, and a bare ``postgresql://`` means psycopg2 on
    SQLAlchemy 2.0: both mean the psycopg 3 driver this project installs."""
    for scheme in ("postgres://", "postgresql://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url.removeprefix(scheme)
    return url


class ConfigError(ValueError):
    """A setting from the environment that cannot work; the message names it."""


def _number(name: str, default: str, kind: type = float, most: float | None = None) -> Any:
    """``name`` from the environment: a finite ``kind`` above 0, and at most ``most``
    when given (else ConfigError)."""
    text = os.environ.get(name, default)
    try:
        value = kind(text)
    except ValueError:
        whole = " whole" if kind is int else ""  # "1.5" is a number, not a whole one
        raise ConfigError(f"{name} must be a{whole} number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number above 0, got {text!r}")
    if most is not None and value > most:
        raise ConfigError(f"{name} must be at most {most:g}, got {text!r}")
    return value


def not_utf8(text: str) -> bool:
    """Whether ``text`` came from bytes that are not UTF-8 (they arrive from the
    environment or the command line as lone surrogates), which no header sends as the
    shop compares them (``_admin_token``, ``loadtest.shop.unsendable_token``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def has_control_character(text: str) -> bool:
    """Whether ``text`` holds a character no HTTP header value can carry: a control
    character (a pasted newline), a tab aside, as RFC 9110 allows."""
    return any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in text)


# The longest SECKILL_ADMIN_TOKEN, in UTF-8 bytes: gunicorn refuses a header line
# longer than 8190 bytes (limit_request_field_size) with 431, and nginx's default
# large_client_header_buffers holds 8k; half of that leaves room for both.
MAX_ADMIN_TOKEN_BYTES = 4096


def _admin_token() -> str:
    """``SECKILL_ADMIN_TOKEN``, or '' (the app then makes a random one). A blank token, or
    one with spaces around it, is refused: the shop strips what follows ``Bearer``, so
    nobody could ever send it and every admin call would be 401. So is one whose bytes
    are not UTF-8 (Latin-1 ``t\xf6k``): the shop compares UTF-8 bytes, and every admin
    call, a wrong token's too, was a 500 (a CLI audit). So is one with a control
    character inside (a tab aside, as HTTP allows): no header carries a newline, so
    ``seckill serve`` printed a token split over two lines that every admin call was
    refused for, and the showdown it served broke every phase (a CLI audit). So is one
    longer than MAX_ADMIN_TOKEN_BYTES: a 9,000-character one was served and printed, and
    every admin call was 431 from gunicorn, which caps a header line at 8190 bytes (a
    text audit)."""
    token = os.environ.get("SECKILL_ADMIN_TOKEN", "")
    if not_utf8(token):
        raise ConfigError("SECKILL_ADMIN_TOKEN is not UTF-8 text (its bytes are in another "
                          "encoding): give one in UTF-8, or unset it (a random one is "
                          "made and printed)")
    if token != token.strip():  # a blank one too
        raise ConfigError("SECKILL_ADMIN_TOKEN is blank or has spaces around it, so no "
                          "Authorization header could carry it: unset it (a random one "
                          "is made and printed) or give one without surrounding spaces")
    if has_control_character(token):
        raise ConfigError("SECKILL_ADMIN_TOKEN has a control character (a pasted newline?) "
                          "that no Authorization header can carry: unset it (a random one "
                          "is made and printed) or give one without it")
    size = len(token.encode("utf-8"))
    if size > MAX_ADMIN_TOKEN_BYTES:
        raise ConfigError(f"SECKILL_ADMIN_TOKEN is {size} bytes long, "
                          "more than an Authorization header carries through gunicorn "
                          f"and nginx: give one of at most {MAX_ADMIN_TOKEN_BYTES} bytes, "
                          "or unset it (a random one is made and printed)")
    return token


def check_urls(config: dict[str, Any]) -> None:
    """REDIS_URL and REDLOCK_URLS must be Redis URLs (a bad one failed every purchase),
    REDLOCK_URLS each a different server, ZOOKEEPER_HOSTS a hosts string kazoo reads,
    and DATABASE_URL a SQLAlchemy URL."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    check_redis_urls(config["REDIS_URL"], config["REDLOCK_URLS"] or [])
    check_zookeeper_hosts(config["ZOOKEEPER_HOSTS"])
    try:
        url = make_url(config["DATABASE_URL"])
        url.get_dialect().import_dbapi()  # an unknown scheme or a missing driver
    except ImportError as exc:  # mysql:// with no MySQLdb installed
        raise ConfigError(f"DATABASE_URL: the driver for {url.drivername!r} is not "
                          f"installed ({exc}); this project installs "
                          "postgresql+psycopg:// and sqlite:///path/to/seckill.sqlite") \
            from None
    except NoSuchModuleError:
        raise ConfigError(f"DATABASE_URL: SQLAlchemy has no database {url.drivername!r} "
                          "(e.g. postgresql+psycopg://user@host/db or "
                          "sqlite:///path/to/seckill.sqlite)") from None
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        raise ConfigError(f"DATABASE_URL: {without_password(config['DATABASE_URL'])!r} "
                          f"is not a database URL ({exc})") from None
    if url.get_backend_name() == "postgresql" and not (
            url.database or url.query.get("dbname") or url.query.get("service")
            or os.environ.get("PGDATABASE") or os.environ.get("PGSERVICE")):
        # libpq picks one: postgresql:// created the shop's tables in the database named
        # after the user, someone else's (a CLI audit)
        raise ConfigError(f"DATABASE_URL: {without_password(config['DATABASE_URL'])!r} "
                          "names no database, and libpq would use the one named after the "
                          "user: name it (postgresql+psycopg://user@host:5432/seckill)")


def check_redis_urls(redis_url: str | None, redlock_urls: list[str]) -> None:
    """``check_urls``' Redis half alone (``None``: no REDIS_URL given), connecting to
    nothing: ``seckill showdown --url`` reads the shop's Redis command counts through
    them and has no database of its own (a URL without its scheme was a ValueError
    traceback there, after the shop had been asked; a showdown audit)."""
    from redis import ConnectionPool, Redis

    from lockcore.strategies.redlock_nodes import check_independent

    pools: dict[str, list[ConnectionPool]] = {"REDIS_URL": [], "REDLOCK_URLS": []}
    for name, urls in (("REDIS_URL", [] if redis_url is None else [redis_url]),
                       ("REDLOCK_URLS", redlock_urls)):
        for url in urls:
            try:
                pools[name].append(ConnectionPool.from_url(url))
            except ValueError as exc:
                raise ConfigError(f"{name}: {without_password(url)!r} is not a Redis URL "
                                  f"({exc})") from None
            parts = urllib.parse.urlsplit(url)
            path = parts.path.strip("/")
            query = urllib.parse.parse_qs(parts.query)  # redis-py reads host=, path= too
            unix = url.startswith("unix:")
            if unix and not (path or query.get("path")):
                raise ConfigError(f"{name}: {without_password(url)!r} names no socket: "
                                  "unix:///path/to/redis.sock")
            if not all(port.isdigit() for port in query.get("port", [])):
                raise ConfigError(f"{name}: {without_password(url)!r}: port= must be a "
                                  "number")
            unknown = _unknown_options(pools[name][-1])
            if unknown:
                hint = (" (a Sentinel's service name: give the shop its primary's address; "
                        "it does not follow a failover)" if "service_name" in unknown else "")
                raise ConfigError(f"{name}: {without_password(url)!r} has an option redis-py "
                                  f"does not take: {', '.join(unknown)}{hint}")
            if not unix and not (parts.hostname or query.get("host")):
                # redis-py reads redis:// as localhost:6379, db 0: a CLI audit's shop
                # seeded a Redis that was not its own, and the banner said "redis://"
                raise ConfigError(f"{name}: {without_password(url)!r} names no host, and "
                                  "redis-py would use 127.0.0.1:6379, whoever's Redis that "
                                  "is: write it out (redis://127.0.0.1:6379/0)")
            if not unix and path and not path.isdigit():
                # redis-py reads ".../abc" as db 0: a mistyped db number wrote into db 0
                raise ConfigError(f"{name}: {without_password(url)!r}: the path must be a "
                                  f"database number (like /0), not {path!r}")
    try:  # every purchase on such a list failed: one server never wins two votes
        check_independent([Redis(connection_pool=pool) for pool in pools["REDLOCK_URLS"]])
    except ValueError as exc:
        raise ConfigError(f"REDLOCK_URLS: {exc}") from None


def _unknown_options(pool: Any) -> list[str]:
    """The options of a Redis URL's query that its connections do not take. redis-py
    passes on every option it does not parse itself, and the connection refuses it when
    it is made: ``?service_name=x`` (a Sentinel's, which redis-py reads only through its
    Sentinel client) started the shop into "could not start: TypeError: AbstractConnection
    .__init__() got an unexpected keyword argument 'service_name'" (a Redis HA audit)."""
    kind = pool.connection_class
    if not isinstance(kind, type):  # ?connection_class=...: a string where a class goes
        return ["connection_class"]
    taken = {name for klass in kind.__mro__ if "__init__" in vars(klass) and klass is not object
             for name, parameter in inspect.signature(klass.__init__).parameters.items()
             if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)}
    return sorted(set(pool.connection_kwargs) - taken)


def check_zookeeper_hosts(hosts: str | None) -> None:
    """``ZOOKEEPER_HOSTS`` (``host:port,...[/chroot]``) as kazoo's ``collect_hosts`` reads
    it, every host named. A bad one was served with a note that no server answers there,
    and kazoo's ``ValueError`` ("bad hostname", for the empty item after a trailing
    comma) made every purchase of a zookeeper sale a 500; ``zk://host:2181`` read as a
    host named ``zk`` (a CLI audit). Without kazoo there is nothing to check: the
    zookeeper strategy then says it needs kazoo."""
    if not hosts:
        return
    try:
        from lockcore.strategies.zookeeper_clients import hosts_problem

        problem = hosts_problem(hosts)
    except ImportError:
        return
    if problem is not None:
        raise ConfigError(f"ZOOKEEPER_HOSTS: {hosts!r} is not a ZooKeeper hosts string "
                          f"like 127.0.0.1:2181,127.0.0.1:2182 ({problem})")


def check_served_database(config: dict[str, Any]) -> None:
    """What ``seckill serve`` needs beyond ``check_urls``: a database every gunicorn
    worker shares (an app in one process, a test's, may use SQLite in memory)."""
    from sqlalchemy.engine import make_url

    url = make_url(config["DATABASE_URL"])
    if url.get_backend_name() == "sqlite" and (url.host or url.port):
        # sqlite://x.sqlite: SQLAlchemy reads a host 'x.sqlite' and no database, and
        # the file was blamed on "an in-memory database" (a review)
        raise ConfigError(f"DATABASE_URL: {without_password(config['DATABASE_URL'])!r} "
                          "names a host, and SQLite takes a file path with no host: "
                          "three slashes for a relative one (sqlite:///relative/path.sqlite), "
                          "four for an absolute one (sqlite:////absolute/path.sqlite)")
    if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        raise ConfigError("DATABASE_URL: an in-memory SQLite database lives in one process, "
                          "and gunicorn's workers are several: give it a file "
                          "(sqlite:///path/to/seckill.sqlite)")


def served_from_env(instance_path: str) -> dict[str, Any]:
    """``from_env``, checked as the gunicorn workers of a served shop will need it
    (``check_urls``, ``check_served_database``): ``ConfigError`` names the variable, before
    anything starts (``seckill serve``, and the shop a showdown serves)."""
    config = from_env(instance_path)
    check_urls(config)
    check_served_database(config)
    check_served_strategy(config)
    # gunicorn_conf.py reads these in the workers' master, where a bad one was a
    # worker that never came up (a one-minute wait for "no log"), or taken as it was;
    # SECKILL_WORKERS too, though serve's --workers overrides it: a gunicorn that could
    # not read its config, after every server had started (a CLI audit)
    _number("SECKILL_WORKER_CONNECTIONS", "1000", int)
    _number("SECKILL_WORKERS", "2", int)
    if _number("SECKILL_GC_GEN0_THRESHOLD", "50000", int) > GC_THRESHOLD_MAX:
        raise ConfigError(f"SECKILL_GC_GEN0_THRESHOLD must be at most {GC_THRESHOLD_MAX} "
                          "(gc.set_threshold takes a C int)")
    level = os.environ.get("SECKILL_LOG_LEVEL", "warning")
    if level.lower() not in LOG_LEVELS:  # each worker failed to boot: "Unknown level"
        raise ConfigError(f"SECKILL_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}; "
                          f"got {level!r}")
    return config


#: the levels gunicorn's ``loglevel`` takes (``SECKILL_LOG_LEVEL``, any case), which
#: gunicorn_conf.py also sets the shop's own log to
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


#: the largest threshold ``gc.set_threshold`` takes: past it, every worker failed to boot
GC_THRESHOLD_MAX = 2**31 - 1


def check_served_strategy(config: dict[str, Any]) -> None:
    """``LOCK_STRATEGY`` names a strategy a sale of this shop can use. It is read only
    when ``serve`` creates ``sku-1`` (a new database): a typo there was an unnamed "could
    not start" after Redis had started, and on an existing database it went unnoticed;
    ``zookeeper`` with no ``ZOOKEEPER_HOSTS`` was served, and every purchase was 503."""
    from .locks import missing_backend
    from .paths import names

    strategy = config["LOCK_STRATEGY"]
    if strategy not in names():
        raise ConfigError(f"LOCK_STRATEGY: unknown strategy {strategy!r}; "
                          f"choose one of {', '.join(names())}")
    # what the admin page refuses to select (redlock: serve embeds its nodes when unset)
    missing = None if strategy == "redlock" else missing_backend(strategy, config)
    if missing:
        raise ConfigError(f"LOCK_STRATEGY: {missing}")


#: the prefixes and names of what a served shop reads from the environment (here and
#: in gunicorn_conf.py)
_SHOP_SETTING_PREFIXES = ("SECKILL_", "LOCK_", "REDIS_")
_SHOP_SETTING_NAMES = ("DATABASE_URL", "REDLOCK_URLS", "ZOOKEEPER_HOSTS",
                       "PURCHASE_CONCURRENCY")


def is_shop_setting(name: str) -> bool:
    """Whether the environment variable ``name`` configures a served shop (the labs
    serve theirs without any, so that their verdicts are the same in every shell)."""
    return name.startswith(_SHOP_SETTING_PREFIXES) or name in _SHOP_SETTING_NAMES


#: the response header in which ``/healthz`` names the serve that started it
#: (``SECKILL_SERVE_ID``; ``ServedApp`` checks it)
SERVE_ID_HEADER = "X-Seckill-Serve-Id"


def default_database_url(instance_path: str) -> str:
    """SQLite in the instance folder: the orders' home when ``DATABASE_URL`` is unset."""
    return f"sqlite:///{os.path.join(instance_path, 'seckill.sqlite')}"


def from_env(instance_path: str) -> dict[str, Any]:
    """The app's config keys, from the environment with working defaults."""
    return {
        "DATABASE_URL": database_url(os.environ.get("DATABASE_URL")
                                     or default_database_url(instance_path)),
        "REDIS_URL": os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL,
        "REDLOCK_URLS": redlock_urls(),
        "ZOOKEEPER_HOSTS": zookeeper_hosts(),
        "SECKILL_ADMIN_TOKEN": _admin_token(),
        # the featured sale's strategy when served (ServedApp reads it for the demo seed)
        "LOCK_STRATEGY": os.environ.get("LOCK_STRATEGY", "token"),
        # redis-py's default pool raises "Too many connections" past its limit; a
        # BlockingConnectionPool makes the 1001st request wait instead (for this long)
        "REDIS_MAX_CONNECTIONS": _number("REDIS_MAX_CONNECTIONS", "400", int),
        "REDIS_POOL_TIMEOUT_S": _number("REDIS_POOL_TIMEOUT_S", "5"),
        # how long a reply may take before 503 busy; a purchase script run later than
        # this (a paused Redis) changes nothing (deadlines.py)
        "REDIS_SOCKET_TIMEOUT_S": _number("REDIS_SOCKET_TIMEOUT_S", "10"),
        # how long a buyer waits for the stock lock before hearing 503 busy; a 1000-buyer
        # spike on two busy cores queues ~100 sections behind one lock, so not too short
        # at most a day: lockcore refuses a wait over a year, and a reset's lock lasts
        # twice the wait (a purchase would have been a 500 past it)
        "LOCK_TIMEOUT_S": _number("LOCK_TIMEOUT_S", "10", most=86_400),
        "LOCK_TTL_MS": _number("LOCK_TTL_MS", "10000", int),
        # lock-path purchases in progress per worker; the rest wait their turn without
        # running. Under gevent every round trip inside the critical section waits for all
        # the runnable greenlets of its worker: fewer of them, a faster lock holder. The
        # lock-free paths (atomic, sql) are not bounded: it capped them by Little's law.
        # A combined lock's buyers (LOCK_COMBINE) are bounded by LOCK_COMBINE_MAX_BATCH
        # instead: they wait locally, not on the lock (docs/performance.md, session 7).
        "PURCHASE_CONCURRENCY": _number("PURCHASE_CONCURRENCY", "64", int),
        # lock cohorting (webapp/cohort.py): a worker passes a held safe lock to its own
        # next buyer, up to MAX_PASSES times within MAX_MS, instead of releasing it
        "LOCK_COHORT": _flag("SECKILL_LOCK_COHORT", "1"),
        "LOCK_COHORT_MAX_PASSES": _number("SECKILL_LOCK_COHORT_MAX_PASSES", "64", int),
        "LOCK_COHORT_MAX_MS": _number("SECKILL_LOCK_COHORT_MAX_MS", "20"),
        # flat combining (webapp/combining.py): the holder of a safe lock serves the
        # batch of its worker's queued buyers (at most MAX_BATCH) in one section; at most
        # MAX_BATCH such buyers per worker are in progress. 256: token sold 78-81% of the
        # no-op's rate sustained, against 65-68% at 64 (docs/performance.md, session 7)
        "LOCK_COMBINE": _flag("SECKILL_LOCK_COMBINE", "1"),
        "LOCK_COMBINE_MAX_BATCH": _number("SECKILL_LOCK_COMBINE_MAX_BATCH", "256", int),
        # auto-pipelining (webapp/pipelining.py): the first script of every purchase
        # waiting at the same moment in a worker goes to Redis in one round trip
        "REDIS_AUTOPIPELINE": _flag("SECKILL_REDIS_AUTOPIPELINE", "1"),
        # units in checkout this long with nothing moving are a crashed purchase's: the
        # sale is reloaded from the database (webapp/checkoutwatch.py); unset: a
        # purchase's longest wait (the page's "no answer") and 15 s more
        "CHECKOUT_STALE_S": (_number("SECKILL_CHECKOUT_STALE_S", "1", most=86_400)
                             if os.environ.get("SECKILL_CHECKOUT_STALE_S") else None),
        "MAX_USER_ID_LENGTH": 64,
        # a purchase is a few dozen bytes; anything far larger is refused with 413
        "MAX_CONTENT_LENGTH": 64 * 1024,
        # set by ServedApp: /healthz answers it in SERVE_ID_HEADER, so that the shop it
        # started is known from another server at the same URL
        "SERVE_ID": os.environ.get("SECKILL_SERVE_ID", ""),
    }
