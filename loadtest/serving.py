"""What the showdown runs against: the app served for it, or a deployment given by URL.

Serving it ourselves is the default so ``make demo`` needs nothing running. ZooKeeper
joins the default strategy list only when ``ZOOKEEPER_HOSTS`` is set or the Debian
package lets ``lockcore.zkserver`` start one; otherwise the showdown says why it is
missing rather than failing a strategy it cannot run.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# REDLOCK_URLS as the shop reads it (spaces around a URL go), the showdown's reading too
from webapp.config import redlock_urls, without_password

from .machine import describe
from .phase import Plan
from .shop import ShopClient, ShopUnreachable

logger = logging.getLogger(__name__)

LOCK_FREE = ("atomic", "sql")


def strategy_names() -> list[str]:
    """Every strategy the shop offers, in teaching order (unsafe first, lock-free last)."""
    try:
        from webapp.paths import names
        return list(names())
    except ImportError:
        import lockcore
        return [*lockcore.names(), *LOCK_FREE]


def strategy_safety(name: str) -> bool:
    """Whether ``name`` is marked safe: the shop's path knows, else lockcore's registry."""
    try:
        from webapp.paths import known  # path_for logs a sale's unknown strategy
        return bool(known(name).safe)
    except Exception:  # noqa: BLE001 - unknown to the shop (or no shop): ask lockcore
        pass
    try:
        from lockcore.registry import lock_class
        return bool(lock_class(name).safe)
    except (ValueError, ImportError):
        return name.split("-")[0] in LOCK_FREE


@dataclass
class Target:
    shop: ShopClient
    redis_clients: list[Any]
    strategies: list[str]
    scratch: str
    notes: list[str] = field(default_factory=list)
    #: the served shop's log (gunicorn's and the shop's), kept: ``--report DIR`` puts it
    #: in ``DIR/raw/``. None: it goes with the scratch folder, or the shop is at ``--url``
    #: and keeps its log to itself
    shop_log: Path | None = None

    def describe(self) -> dict[str, Any]:
        info = describe(self.redis_clients[0] if self.redis_clients else None)
        info["url"] = without_password(self.shop.url)  # the report is shared
        info["notes"] = self.notes
        return info


def _start_zookeeper(stack: contextlib.ExitStack) -> str | None:
    try:
        from lockcore.zkserver import ZooKeeperServer
        server = ZooKeeperServer()
        stack.callback(server.stop)
        server.start()
        return str(server.hosts)
    except Exception as exc:  # noqa: BLE001 - no java or jars: run without ZooKeeper
        logger.warning("no ZooKeeper: %s", exc)
        return None


def malformed_redis_urls() -> str | None:
    """What is wrong with ``REDIS_URL`` or ``REDLOCK_URLS`` as Redis URLs, naming the
    variable (``webapp.config.check_redis_urls``); None when nothing is. With ``--url``
    the showdown opens them itself, to count the shop's Redis commands."""
    from webapp.config import ConfigError, check_redis_urls

    try:
        check_redis_urls(os.environ.get("REDIS_URL") or None, redlock_urls())
    except ConfigError as exc:
        return str(exc)
    return None


def _shop_env(args: argparse.Namespace) -> dict[str, str]:
    timeout = getattr(args, "lock_timeout", None)
    return {"LOCK_TIMEOUT_S": str(timeout)} if timeout else {}


def leave_out_unusable(shop: ShopClient, strategies: list[str], notes: list[str],
                       named: bool) -> None:
    """Drop from ``strategies`` (with a note) what the running shop says it cannot run
    (no ZooKeeper hosts or no kazoo, no RedLock nodes): a reset to it would be refused
    in its phase. :raises ShopUnreachable: one of them was ``named`` by the user."""
    lacking = shop.unusable_strategies()
    for name in [n for n in strategies if n in lacking]:
        if named:
            raise ShopUnreachable(f"the shop at {shop.url} cannot run {name}: {lacking[name]}")
        strategies.remove(name)
        notes.append(f"{name} skipped: the shop at {without_password(shop.url)} cannot "
                     f"run it ({lacking[name]})")
        print(notes[-1], flush=True)


@contextlib.contextmanager
def serve_target(args: argparse.Namespace, wanted: list[str],
                 named: bool = False, log_path: Path | None = None) -> Iterator[Target]:
    """Yield a Target for ``wanted`` strategies; everything started is stopped on exit.

    :param named: the user named ``wanted``: a strategy that cannot run here (no
        ZooKeeper) is an error, not a note and a table without it.
    :param log_path: where the shop it serves logs (appended to, kept); unused with
        ``--url``, whose shop has its own.
    """
    import redis

    strategies, notes = list(wanted), []
    shop_log = None
    with contextlib.ExitStack() as stack:
        if getattr(args, "url", None):
            redlock = redlock_urls()  # malformed_redis_urls read it first, and took it
            token = args.admin_token or os.environ.get("SECKILL_ADMIN_TOKEN")
            shop = ShopClient(args.url, token)
            problem = shop.unusable(Plan.sku)
            if problem is not None:
                raise ShopUnreachable(problem)
            leave_out_unusable(shop, strategies, notes, named)
            redis_urls = [u for u in [os.environ.get("REDIS_URL"), *redlock] if u]
        else:
            from webapp import config as settings
            from webapp.served import StartupError  # what showdown reports in one line

            try:  # what the shop's workers will read, named as `seckill serve` names it
                settings.served_from_env(tempfile.gettempdir())
            except settings.ConfigError as exc:
                raise StartupError(str(exc)) from None
            redlock = redlock_urls()

            zk_hosts = None
            if "zookeeper" in strategies:
                zk_hosts = settings.zookeeper_hosts() or _start_zookeeper(stack)
                if zk_hosts is None and named:
                    raise StartupError("zookeeper was asked for, but there is no "
                                       "ZOOKEEPER_HOSTS and no local ZooKeeper (Debian: "
                                       "apt-get install zookeeper)")
                if zk_hosts is None:
                    strategies.remove("zookeeper")
                    notes.append("zookeeper skipped: no ZOOKEEPER_HOSTS and no local ZooKeeper")
                    print(notes[-1], flush=True)
            from webapp.serve import ServedApp
            print("serving the shop (embedded Redis unless REDIS_URL, SQLite unless "
                  "DATABASE_URL) ...", flush=True)
            try:
                app = stack.enter_context(ServedApp(
                    workers=args.workers or 2, redis_url=os.environ.get("REDIS_URL") or None,
                    # empty is unset, as for REDIS_URL and `seckill serve`
                    database_url=os.environ.get("DATABASE_URL") or None,
                    redlock_urls=redlock or None,
                    zookeeper_hosts=zk_hosts, env=_shop_env(args), log_path=log_path))
                shop_log = app.log_path  # its own name if another run holds log_path
            except StartupError:
                raise
            except Exception as exc:  # an unreachable REDIS_URL or database, a bad URL
                first = str(exc).splitlines()[0] if str(exc) else ""
                raise StartupError(f"could not serve the shop: {type(exc).__name__}: "
                                   f"{first}") from exc
            shop = ShopClient(app.url, app.admin_token)
            print(f"the shop is at {app.url}/ (open it to watch the stock go)", flush=True)
            # which Redis and database it sells from: REDIS_URL or DATABASE_URL left set
            # in the shell sent a workshop's showdown into the reader's own (a workshop
            # audit), and the line above never said so
            sources = {"Redis": ("REDIS_URL", app.redis_url),
                       "database": ("DATABASE_URL", app.database_url)}
            print("  " + ", ".join(f"{part} {settings.without_password(str(url))} "
                                   f"({'from ' + name if os.environ.get(name) else 'its own'})"
                                   for part, (name, url) in sources.items()), flush=True)
            try:  # what it cannot run after all (ZOOKEEPER_HOSTS, but no kazoo)
                leave_out_unusable(shop, strategies, notes, named)
            except ShopUnreachable as exc:
                raise StartupError(str(exc)) from None
            redis_urls = [str(app.redis_url), *(getattr(app, "redlock_urls", None) or [])]
        clients = [redis.Redis.from_url(u, socket_timeout=5) for u in redis_urls]
        for client in clients:
            stack.callback(client.close)
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="seckill-showdown-"))
        yield Target(shop, clients, strategies, scratch, notes, shop_log)
