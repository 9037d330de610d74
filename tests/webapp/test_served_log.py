"""The served shop's log: each line says when, which worker, how bad and who, and the
file is moved aside when full (a PostgreSQL fault audit: lines with no time, level or
pid, and a kept log of 42 MB after 15 minutes, appended to and never rotated)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.webapp.served import call
from webapp.serve import ServedApp

SKU = "sku-2"  # the demo's atomic sale
LOST = "Redis lost the sale"
DATED = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\] \[\d+\] \[WARNING\] "
                   r"webapp\.saleinfo: sku-2: Redis lost the sale")


@pytest.fixture(scope="module")
def served() -> Iterator[ServedApp]:
    with ServedApp(workers=1) as app:
        yield app


def lose_the_sale(app: ServedApp, buyer: str) -> None:
    """A warning from the worker: Redis forgets the sale, a buyer reloads it."""
    redis.Redis.from_url(app.redis_url or "").flushall()
    status, answer = call(f"{app.url}/api/products/{SKU}/purchase", "POST",
                          {"user_id": buyer})
    assert status == 201, answer


def lost_lines(log: Path) -> list[str]:
    text = log.read_text() if log.exists() else ""
    return [line for line in text.splitlines() if LOST in line]


def test_a_served_shops_warning_carries_its_time_pid_level_and_logger(served):
    # it was the message alone: "sku-2: Redis lost the sale; ..." (Python's last resort)
    lose_the_sale(served, "ann")
    lines = lost_lines(served.logfile)
    assert lines and all(DATED.match(line) for line in lines), lines
    # warnings and up by default (SECKILL_LOG_LEVEL), as before: not a line per order
    assert "[INFO] webapp" not in served.logfile.read_text()


def test_a_full_log_is_moved_aside_and_gunicorn_writes_a_new_one(served):
    lose_the_sale(served, "bob")
    before = lost_lines(served.logfile)
    assert served.rotate_log(max_bytes=1)
    assert lost_lines(served.logfile.with_name("gunicorn.log.1")) == before
    deadline = time.monotonic() + 30  # the worker reopens on its SIGUSR1, by itself
    buyers = iter(range(1000))
    while not lost_lines(served.logfile):
        assert time.monotonic() < deadline, "gunicorn did not reopen its log"
        lose_the_sale(served, f"buyer-{next(buyers)}")
    assert all(DATED.match(line) for line in lost_lines(served.logfile))


def test_a_log_below_the_limit_stays_and_only_the_newest_old_ones_are_kept(tmp_path):
    log = tmp_path / "seckill-serve.log"
    app = ServedApp(log_path=log)  # not started: only its files
    log.write_text("short\n")
    assert not app.rotate_log(max_bytes=100)
    for run in range(5):
        log.write_text(f"run {run}\n" * 20)
        assert app.rotate_log(max_bytes=100, backups=3)
    assert not log.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "seckill-serve.log.1", "seckill-serve.log.2", "seckill-serve.log.3"]
    assert (tmp_path / "seckill-serve.log.1").read_text().startswith("run 4")
    assert (tmp_path / "seckill-serve.log.3").read_text().startswith("run 2")


def test_two_shops_given_one_log_each_write_a_log_of_their_own(tmp_path):
    # two serves in one folder, each with its own database, wrote one
    # seckill-serve.log: one moving it aside signalled only its own gunicorn, and the
    # other wrote on into the moved file, then a removed one (a serve audit)
    import contextlib
    import os

    log = tmp_path / "seckill-serve.log"

    def shop(n: int) -> ServedApp:
        return ServedApp(workers=1, database_url=f"sqlite:///{tmp_path / f'shop{n}.sqlite'}",
                         redlock_urls=[], log_path=log)

    with contextlib.ExitStack() as stack:
        first, second = (stack.enter_context(shop(n)) for n in (1, 2))
        assert first.logfile == log
        assert second.logfile == tmp_path / f"seckill-serve-{os.getpid()}.log"
        assert second.logfile.exists()
    # the pid-named lock is gone with its shop (each second serve in a folder left one,
    # and an empty log beside it when it wrote nothing: a review); a log with lines stays
    assert not (tmp_path / f"seckill-serve-{os.getpid()}.log.lock").exists()
    assert second.logfile.exists() == (second.logfile.exists()
                                       and second.logfile.stat().st_size > 0)
    with shop(3) as later:  # theirs is free again
        assert later.logfile == log
