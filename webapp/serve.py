"""Serve the storefront and its API with gunicorn until Ctrl-C.

Embedded Redis and SQLite unless configured, migrations, demo products, gunicorn
(``seckill serve``).

SQLite lives in ``./instance/`` here, so the shop survives a restart; ``ServedApp``
(re-exported from this module) is the same thing with a temp file, for programs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import config as settings
from .cli import stopping
from .served import (
    ServedApp,
    StartupError,
    few_redlock_nodes,
    ignored_gunicorn_args,
    unreachable_lock_servers,
)

__all__ = ["ServedApp", "add_arguments", "main"]


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)  # ValueError: argparse's "invalid value" usage error
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}")
        return value

    parse.__name__ = "int"  # what argparse names in "invalid int value"
    return parse


def _host(text: str) -> str:
    """An address or host name to bind; ``[::1]`` as written in a URL is ``::1`` (it was
    a ValueError), and an empty one is refused (gunicorn waited 60 s on it)."""
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c.isspace() or c in "[]/" for c in host):
        raise argparse.ArgumentTypeError(f"not an address or host name: {text!r} "
                                         "(like 127.0.0.1, 0.0.0.0 or ::1)")
    return host


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", type=_host, default="127.0.0.1",
                        help="address to bind (default 127.0.0.1; 0.0.0.0 or :: for all)")
    parser.add_argument("--port", type=_bounded(0, 65535), default=8000,
                        help="default: 8000; 0: any free port (the URL printed names it)")
    parser.add_argument("--workers", type=_bounded(1, 64), default=2,
                        help="gunicorn gevent workers (default: 2)")


def _report_gone_redis(served: ServedApp, reported: set[int]) -> None:
    """Say once that an embedded Redis exited: the page went on answering from the
    database while every purchase was refused, and the terminal said nothing."""
    for server in served.gone_redis():
        if server.port in reported:
            continue
        reported.add(server.port)
        which = "the shop's Redis" if server.url == served.redis_url else "a RedLock node"
        code = server.proc.returncode if server.proc is not None else None
        print(f"seckill serve: {which} (embedded, port {server.port}) exited on its own "
              f"(code {code}): purchases that need it are refused with 503; Ctrl-C and "
              "serve again to start a fresh one", file=sys.stderr, flush=True)


def _unwritable_instance(instance: Path, database_given: bool) -> str | None:
    """Why ``./instance/`` (the shop's log, and its SQLite database unless
    ``DATABASE_URL`` is set) cannot be written, if it cannot; asked after a failed start
    only, and leaving nothing behind (a probe file, removed). In a folder the user may
    not write to, the start failed with "DATABASE_URL sqlite:////.../instance/...:
    cannot use ..." when DATABASE_URL was not set, and "PermissionError: ..." when it
    was (a CLI audit)."""
    import tempfile

    where = instance if instance.is_dir() else instance.parent
    try:
        with tempfile.TemporaryFile(dir=where):
            return None
    except OSError as exc:
        what = "the shop's log" if database_given else "the shop's log and SQLite database"
        return (f"cannot write {what} in {instance} ({exc.strerror or exc}): run it in a "
                "folder you may write to")


def _zookeeper_line(hosts: str | None) -> str:
    """The banner's ZooKeeper line: serve starts none of its own, so without
    ZOOKEEPER_HOSTS the ``zookeeper`` strategy is refused (400), and the banner says so
    up front (a contract audit found it only at the first reset)."""
    return hosts or "none (set ZOOKEEPER_HOSTS for the zookeeper strategy)"


def main(args: argparse.Namespace) -> int:
    try:  # what the workers will read, checked before anything starts
        config = settings.served_from_env(str(Path.cwd() / "instance"))  # SQLite there
    except settings.ConfigError as exc:
        print(f"seckill serve: {exc}", file=sys.stderr)
        return 2
    database_url, redlock = config["DATABASE_URL"], config["REDLOCK_URLS"] or None
    # SIGTERM, SIGHUP (unless ignored: nohup) and SIGINT (even for `seckill serve &`)
    # raise KeyboardInterrupt here: ``webapp.cli.stop_like_ctrl_c`` set that up for
    # every command
    # the shop's log outlives it: warnings for an operator to settle (an order in doubt,
    # units that could not go back) were in a temp dir removed on exit
    # an empty REDIS_URL is unset, as for DATABASE_URL (it was "Redis URL must specify
    # one of the following schemes", naming no variable)
    log = Path.cwd() / "instance" / "seckill-serve.log"  # another serve's: one of its own
    served = ServedApp(args.host, args.port or None, args.workers,
                       os.environ.get("REDIS_URL") or None,
                       database_url, redlock, settings.zookeeper_hosts(),
                       log_path=log)
    try:
        served.start()  # stops what it started if it fails
    except Exception as exc:  # noqa: BLE001 - one line, whatever it was
        if stopping():  # a Ctrl-C that kazoo swallowed on the way: "could not start",
            raise  # exit 1, for an interrupt (``webapp.cli.STOPPING``; a labs audit)
        unwritable = _unwritable_instance(log.parent, bool(os.environ.get("DATABASE_URL")))
        if unwritable is not None:  # not "DATABASE_URL ...", set or not (a CLI audit)
            print(f"seckill serve: {unwritable}", file=sys.stderr)
        elif isinstance(exc, StartupError):
            print(f"seckill serve: {exc}", file=sys.stderr)
        else:  # an unreachable REDIS_URL or database, a missing driver
            print(f"seckill serve: could not start: {type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
        return 1
    reported: set[int] = set()
    try:
        try:  # from here a Ctrl-C is a clean stop: one right after the banner was exit 130
            taken = ([f"{log} is another seckill serve's (in this folder): this one "
                      f"logs to {served.logfile.name}"] if served.logfile != log else [])
            for note in [*served.redis_notes, *taken, *ignored_gunicorn_args(),
                         *few_redlock_nodes(served.redlock_urls),
                         *unreachable_lock_servers(served.redlock_urls, served.zookeeper_hosts)]:
                print(f"seckill serve: note: {note}", file=sys.stderr, flush=True)
            print(f"storefront  {served.url}/\nadmin page  {served.url}/admin\n"
                  f"admin token {served.admin_token}\n"
                  f"Redis       {settings.without_password(served.redis_url or '')}\n"
                  f"database    {settings.without_password(served.database_url or '')}\n"
                  f"ZooKeeper   {_zookeeper_line(served.zookeeper_hosts)}\n"
                  f"log         {served.logfile}\n"
                  "Ctrl-C stops everything.", flush=True)
            while served.proc is not None and served.proc.poll() is None:
                time.sleep(0.5)
                _report_gone_redis(served, reported)
                served.rotate_log()
        except KeyboardInterrupt:
            print("stopping ...", flush=True)
            return 0
        code = served.proc.returncode if served.proc is not None else None
        print(f"seckill serve: gunicorn exited on its own (code {code}); stopping the rest",
              file=sys.stderr)
        return 1
    finally:
        served.stop()
