"""Against a real gunicorn with two gevent workers: every safe strategy keeps the books
straight under a stampede, and the naive ones oversell, as the lesson says they do.

Reduced size by default (200 buyers, 20 units): enough for the race to show, small
enough for two busy cores. The full 1000-buyer runs belong to the showdown.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lockcore.registry import lock_class
from tests.webapp.served import audit, call, reset_sale, stampede
from webapp import paths
from webapp.serve import ServedApp

SKU = "sku-1"
BUYERS, STOCK = 200, 20


@pytest.fixture(scope="module")
def served() -> Iterator[ServedApp]:
    with ServedApp(workers=2, env={"LOCK_TIMEOUT_S": "10"}) as app:
        yield app


def is_safe(strategy: str) -> bool:
    try:
        return bool(lock_class(strategy).safe)
    except ValueError:  # not a lock: a lock-free path of the shop
        return bool(paths.path_for(strategy).safe)


SAFE = [s for s in paths.names() if is_safe(s) and s != "zookeeper"]


@pytest.mark.parametrize("strategy", SAFE)
def test_a_safe_strategy_sells_exactly_the_stock_under_a_stampede(served, strategy):
    reset_sale(served, SKU, stock=STOCK, strategy=strategy, work_ms=5)
    statuses = stampede(served, SKU, BUYERS)
    # 503 busy is allowed (a lock may be slow to get: RedLock's split votes), 500 is not
    assert set(statuses) <= {201, 409, 503}, sorted(set(statuses))
    result = audit(served, SKU)
    assert 0 < statuses.count(201) == result["orders"] == result["units_sold"] <= STOCK, result
    assert result["oversold"] == 0 and result["consistent"], result


@pytest.mark.parametrize("strategy", ["naive", "local"])
def test_an_unsafe_lock_loses_updates_and_oversells(served, strategy):
    """naive: GET-then-SET lets two buyers in; local: each worker has its own lock."""
    reset_sale(served, SKU, stock=STOCK, strategy=strategy, work_ms=30)
    statuses = stampede(served, SKU, BUYERS, threads=40)
    result = audit(served, SKU)
    assert 500 not in statuses
    assert result["oversold"] > 0, result
    assert result["units_sold"] == statuses.count(201) > STOCK
    assert result["consistent"] is False


def test_one_user_and_one_idempotency_key_across_two_workers_make_one_order(served):
    from concurrent.futures import ThreadPoolExecutor

    reset_sale(served, SKU, stock=STOCK, strategy="token", work_ms=20)
    url = f"{served.url}/api/products/{SKU}/purchase"

    def send(headers):
        return call(url, "POST", {"user_id": "eager"}, headers)

    with ThreadPoolExecutor(20) as pool:
        keyed = list(pool.map(send, [{"Idempotency-Key": "one-key"}] * 20))
        unkeyed = list(pool.map(send, [{}] * 20))
    assert sorted(status for status, _ in keyed) == [200] * 19 + [201], keyed
    assert len({body["order_id"] for _, body in keyed}) == 1
    assert {status for status, _ in unkeyed} == {409}
    result = audit(served, SKU)
    assert (result["orders"], result["consistent"]) == (1, True), result


def test_lock_strategy_picks_the_featured_sales_strategy():
    with ServedApp(workers=1, env={"LOCK_STRATEGY": "fair"}) as app:
        status, product = call(f"{app.url}/api/products/sku-1")
    assert (status, product["strategy"]) == (200, "fair")


def test_the_served_app_reports_healthy_and_serves_the_storefront(served):
    assert call(f"{served.url}/healthz") == (200, {"redis": "ok", "database": "ok"})
    status, products = call(f"{served.url}/api/products")
    assert status == 200 and {p["sku"] for p in products} >= {"sku-1", "sku-2", "sku-3"}


def test_leaving_served_app_stops_gunicorn_and_redis_and_removes_its_files():
    app = ServedApp(workers=1)
    with app:
        pid, workdir = app.pid, app.workdir
        assert pid is not None and workdir is not None and workdir.exists()
    assert app.pid is None and not workdir.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.postgres
def test_gevent_workers_on_postgresql_keep_the_books_straight(postgres_url):
    """psycopg 3 under gevent's monkey patching, through real gunicorn workers."""
    with ServedApp(workers=2, database_url=postgres_url) as app:
        for strategy in ("token", "sql"):
            reset_sale(app, SKU, stock=STOCK, strategy=strategy, work_ms=5)
            statuses = stampede(app, SKU, BUYERS // 2)
            result = audit(app, SKU)
            assert set(statuses) <= {201, 409}, (strategy, sorted(set(statuses)))
            assert statuses.count(201) == result["units_sold"] == STOCK, (strategy, result)
            assert result["consistent"], (strategy, result)


@pytest.mark.zookeeper
def test_the_zookeeper_strategy_works_inside_gevent_workers(zookeeper_hosts):
    """kazoo runs on its gevent handler there; its threads would stall the hub."""
    with ServedApp(workers=2, zookeeper_hosts=zookeeper_hosts) as app:
        reset_sale(app, SKU, stock=10, strategy="zookeeper", work_ms=5)
        statuses = stampede(app, SKU, 60, threads=10)
        result = audit(app, SKU)
    assert set(statuses) <= {201, 409, 503}, sorted(set(statuses))
    assert 0 < statuses.count(201) == result["units_sold"] <= 10, result
    assert result["consistent"], result


def test_seckill_serve_prints_the_url_and_token_and_stops_everything_on_ctrl_c(tmp_path):
    import signal
    import subprocess
    import sys

    from lockcore.embedded import free_port

    port = free_port()
    env = {**os.environ, "SECKILL_ADMIN_TOKEN": "cli-token"}
    for name in ("REDIS_URL", "DATABASE_URL", "REDLOCK_URLS", "ZOOKEEPER_HOSTS"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "webapp.cli", "serve", "--port", str(port),
                             "--workers", "1"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        lines = [proc.stdout.readline() for _ in range(6)]
        assert lines[0].strip() == f"storefront  http://127.0.0.1:{port}/", lines
        assert "cli-token" in lines[2]
        # no ZooKeeper of its own: the banner says the strategy needs one, up front
        assert lines[5].startswith("ZooKeeper   none (set ZOOKEEPER_HOSTS"), lines
        assert call(f"http://127.0.0.1:{port}/api/products/sku-1")[0] == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:  # it did not stop: clean up what it started, by pid
            import psutil

            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()
        proc.stdout.close()
    with pytest.raises(OSError):
        call(f"http://127.0.0.1:{port}/healthz")
    assert (tmp_path / "instance" / "seckill.sqlite").exists()


def test_a_request_gunicorn_cannot_parse_is_answered_with_json_too(served):
    import json
    import socket

    port = int(served.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head
    assert set(json.loads(body)) == {"error", "detail"}


def test_a_worker_freezes_the_apps_objects_and_collects_young_ones_less_often(monkeypatch):
    import gc
    import threading

    from webapp import gunicorn_conf, retrylater

    # the hook also starts the worker's undo-draining thread: here it is stopped after
    # the test (left running, it drained the undo queues of this test process's later
    # tests at moments of its own: test_reset_lock_lost_reply saw its lock let go early)
    stop = threading.Event()
    started: list[threading.Thread] = []
    real_drain_every = retrylater.drain_every
    monkeypatch.setattr(retrylater, "drain_every",
                        lambda every_s, **also: started.append(
                            real_drain_every(every_s, stop, **also)))
    threshold = gc.get_threshold()
    try:
        gunicorn_conf.post_worker_init(worker=None)
        assert gc.get_freeze_count() > 1000  # everything imported so far
        assert gc.get_threshold() == (gunicorn_conf.GC_GEN0_THRESHOLD, *threshold[1:])
        assert gunicorn_conf.GC_GEN0_THRESHOLD > threshold[0]
        assert len(started) == 1  # and the undos are drained without a buyer
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        stop.set()
        for thread in started:
            thread.join(5)


def test_a_shop_that_cannot_start_names_the_exception_not_gunicorns_last_words(tmp_path):
    # a worker that fails to boot ends gunicorn's log with "Reason: Worker failed to
    # boot."; the one line said that and hid the exception four lines above
    from webapp.served import _the_exception

    log = ["[2026-11-27 10:00:00 +0000] [7] [INFO] Booting worker with pid: 8",
           "Traceback (most recent call last):",
           '  File "webapp/app.py", line 3, in create_app',
           "RuntimeError: the shop cannot start",
           "[2026-11-27 10:00:01 +0000] [8] [INFO] Worker exiting (pid: 8)",
           "[2026-11-27 10:00:01 +0000] [7] [ERROR] Worker (pid:8) exited with code 3",
           "[2026-11-27 10:00:01 +0000] [7] [ERROR] Shutting down: Master",
           "[2026-11-27 10:00:01 +0000] [7] [ERROR] Reason: Worker failed to boot."]
    assert _the_exception(log) == "RuntimeError: the shop cannot start"
    assert _the_exception(log[-2:]) == log[-1]  # no exception: the last line
    assert _the_exception([]) == "no log"


def test_a_shop_that_cannot_start_quotes_only_its_own_run_of_a_kept_log(tmp_path):
    # the kept log (seckill serve's instance/seckill-serve.log) holds earlier runs: a
    # gunicorn that died without a word was reported with an earlier run's last error
    # (a CLI audit)
    from webapp.served import StartupError

    kept = tmp_path / "seckill-serve.log"
    kept.write_text("[2026-11-28 19:45:46 +0000] [7] [INFO] Booting worker\n"
                    "RuntimeError: a failure from an earlier run\n")
    silent = tmp_path / "silent" / "gunicorn"  # a gunicorn that exits and says nothing
    silent.mkdir(parents=True)
    (silent / "__init__.py").write_text("")
    (silent / "__main__.py").write_text("raise SystemExit(3)\n")
    app = ServedApp(workers=1, env={"PYTHONPATH": str(silent.parent)}, log_path=kept,
                    startup_timeout=30)
    with pytest.raises(StartupError) as raised:
        app.start()
    assert "earlier run" not in str(raised.value), raised.value
    assert str(raised.value).startswith("gunicorn exited (3) before it answered at "), \
        raised.value
    assert "no log" in str(raised.value), raised.value


def test_a_shop_that_does_not_answer_in_time_says_how_long_it_waited(tmp_path):
    # "gunicorn did not become healthy at URL: no log" after 72 s (64 workers on a
    # loaded machine), not saying it had waited its 60 s (a CLI audit)
    from webapp.served import StartupError

    mute = tmp_path / "mute" / "gunicorn"  # a gunicorn that never answers
    mute.mkdir(parents=True)
    (mute / "__init__.py").write_text("")
    (mute / "__main__.py").write_text("import time\ntime.sleep(60)\n")
    app = ServedApp(workers=1, env={"PYTHONPATH": str(mute.parent)}, startup_timeout=2)
    with pytest.raises(StartupError) as raised:
        app.start()
    assert "/healthz with 200 within 2 s" in str(raised.value), raised.value
    assert ServedApp(workers=64).startup_timeout > ServedApp(workers=1).startup_timeout >= 60
