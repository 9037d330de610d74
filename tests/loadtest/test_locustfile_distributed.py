"""The locustfile in Locust's distributed mode: one master, two worker processes.

Workers spawn independently, so the spike barrier's wall-clock start instant
(``--seckill-start-at``) is what lines their buyers up; both workers append to one
arrival log. Against the stub shop, on loopback, bounded to 40 buyers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from loadtest import arrivals
from loadtest.phase import LOCUSTFILE, SHAPES
from lockcore.embedded import free_port
from tests.loadtest.stubshop import StubShop, serve

pytestmark = pytest.mark.timeout(120)


def test_two_workers_fire_together_at_the_start_instant_and_log_every_attempt(tmp_path):
    shop, log_path, port = StubShop(stock=10), tmp_path / "arrivals.jsonl", free_port()
    start_at = time.time() + 8  # after both workers have connected and spawned
    common = ["-f", f"{LOCUSTFILE},{SHAPES}", "--seckill-stock", "10",
              "--seckill-start-at", str(start_at), "--seckill-arrivals", str(log_path)]
    env = {**os.environ, "SECKILL_TAIL": "4"}  # above the workers' 3 s report interval
    procs = []
    with serve(shop) as url:
        try:
            master = subprocess.Popen(
                [sys.executable, "-m", "locust", *common, "--master", "--headless",
                 "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                 "--expect-workers", "2", "-u", "40", "-r", "40", "-t", "60s",
                 "--host", url, "--csv", str(tmp_path / "run"), "--only-summary"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(master)
            for _ in range(2):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "locust", *common, "--worker",
                     "--master-host", "127.0.0.1", "--master-port", str(port)],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            output, _ = master.communicate(timeout=90)
            for worker in procs[1:]:  # each writes its log as it stops, after the master
                worker.wait(timeout=30)  # (killed at once, one lost it: a loaded CI run)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(timeout=10)
    assert "every buyer browsed and nothing moved" in output, output[-3000:]
    log = arrivals.read_arrivals(log_path)
    assert arrivals.outcome_counts(log)["order"] == 10
    assert len({a.user.split("-")[1] for a in log}) == 2  # buyer ids carry the worker pid
    first = [a.sent for a in log if a.attempt == 1]
    assert min(first) >= start_at - 0.05  # nobody jumped the gun
    assert shop.audit()["consistent"]
