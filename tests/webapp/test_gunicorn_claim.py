"""gunicorn run by hand claims the shop's database and Redis, as ``seckill serve`` does
(``webapp/claimholder.py``): a shop of another database on the same Redis is refused, a
second host of the same one is not, and the claims go with the master."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

from lockcore.embedded import free_port

pytestmark = pytest.mark.timeout(180)


def _gunicorn(tmp_path: Path, name: str, database_url: str,
              redis_url: str) -> tuple[Any, str, Path]:
    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_URL": database_url,
           "SECKILL_WORKERS": "1", "SECKILL_BIND": f"127.0.0.1:{port}",
           "SECKILL_ADMIN_TOKEN": "t", "REDLOCK_URLS": redis_url}
    env.pop("SECKILL_SERVE_ID", None)
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config",
                                   "python:webapp.gunicorn_conf"], env=env, stdout=out,
                                  stderr=subprocess.STDOUT, cwd=tmp_path)
    return server, f"http://127.0.0.1:{port}", log


def _healthy(server: Any, base: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        try:
            urllib.request.urlopen(base + "/healthz", timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # answering
        except OSError:
            time.sleep(0.2)


def _stop(server: Any) -> None:
    if server.poll() is None:
        server.terminate()
        server.wait(20)


def _shops(redis_url: str) -> list[str]:
    client = redis.Redis.from_url(redis_url)
    try:
        return [c["name"] for c in client.client_list()
                if c["name"].startswith("seckill-shop-")]
    finally:
        client.close()


def test_a_gunicorn_shop_claims_its_redis_and_database(tmp_path, redis_url):
    from webapp import db

    first, second = (f"sqlite:///{tmp_path / name}.sqlite" for name in ("a", "b"))
    for url in (first, second):
        db.upgrade(url)
    a, base_a, log_a = _gunicorn(tmp_path, "a", first, redis_url)
    started: list[Any] = [a]
    try:
        _healthy(a, base_a, log_a)
        assert len(_shops(redis_url)) == 1, _shops(redis_url)
        # another database on the same Redis: refused, before any worker
        b, _, log_b = _gunicorn(tmp_path, "b", second, redis_url)
        started.append(b)
        assert b.wait(60) != 0, log_b.read_text()
        # naming the master, whose stop stops the shop (not its claim holder's pid)
        assert f"another seckill shop (pid {a.pid}" in log_b.read_text(), log_b.read_text()
        # a second host of the same database and servers: shares both claims
        c, base_c, log_c = _gunicorn(tmp_path, "c", first, redis_url)
        started.append(c)
        _healthy(c, base_c, log_c)
        assert len(_shops(redis_url)) == 2, _shops(redis_url)
        _stop(c)
        _stop(a)
        assert _shops(redis_url) == []  # the claims went with the masters
        # and the other database's shop starts now
        d, base_d, log_d = _gunicorn(tmp_path, "d", second, redis_url)
        started.append(d)
        _healthy(d, base_d, log_d)
    finally:
        for server in started:
            _stop(server)
