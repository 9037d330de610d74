"""gunicorn run with the shop's settings and no ``SECKILL_ADMIN_TOKEN`` (the image's
``CMD``, or an operator's own command line): one admin token for every worker, printed
in the log, as the contract says of an unset token."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from lockcore.embedded import free_port

pytestmark = pytest.mark.timeout(120)


def _status(request: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_gunicorn_without_a_token_prints_one_every_worker_takes(sqlite_url, redis_url,
                                                                 tmp_path):
    port = free_port()
    env = {key: value for key, value in os.environ.items()
           if key != "SECKILL_ADMIN_TOKEN"}
    env.update(REDIS_URL=redis_url, DATABASE_URL=sqlite_url, SECKILL_WORKERS="2",
               SECKILL_BIND=f"127.0.0.1:{port}")
    log = tmp_path / "gunicorn.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "gunicorn", "--config",
                                   "python:webapp.gunicorn_conf"],
                                  env=env, stdout=out, stderr=subprocess.STDOUT,
                                  cwd=tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while not _answers(base + "/healthz"):
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        printed = re.search(r"admin token of this server's workers is (\S+)",
                            log.read_text())
        assert printed, log.read_text()
        answers = set()
        for _ in range(12):  # new connections: both workers, whichever answers
            request = urllib.request.Request(
                base + "/api/admin/sales/no-such-sku", method="PUT",
                data=b'{"stock": 1, "strategy": "token"}',
                headers={"Authorization": f"Bearer {printed.group(1)}",
                         "Content-Type": "application/json", "Connection": "close"})
            answers.add(_status(request))
        assert 401 not in answers, answers
    finally:
        server.terminate()
        server.wait(15)



def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True  # answering, if not healthy yet
    except OSError:
        return False
    return True


def test_the_compose_files_default_token_is_warned_about(monkeypatch):
    from pathlib import Path

    from webapp import gunicorn_conf

    compose = (Path(__file__).parents[2] / "docker-compose.yml").read_text()
    assert f"${{SECKILL_ADMIN_TOKEN:-{gunicorn_conf.COMPOSE_DEFAULT_TOKEN}}}" in compose
    said: list[str] = []

    class Log:
        def warning(self, msg: str, *args: object) -> None:
            said.append(msg % args)

    class Server:
        log = Log()

    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", gunicorn_conf.COMPOSE_DEFAULT_TOKEN)
    gunicorn_conf.on_starting(Server())
    assert len(said) == 1 and "set your own" in said[0], said
    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", "an-operators-own-long-token")
    gunicorn_conf.on_starting(Server())
    assert len(said) == 1, said
    monkeypatch.setenv("SECKILL_ADMIN_TOKEN", "admin")  # a security audit: taken silently
    gunicorn_conf.on_starting(Server())
    assert len(said) == 2 and "5 characters" in said[1], said
