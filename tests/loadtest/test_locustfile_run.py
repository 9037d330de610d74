"""The locustfile run as plain Locust (a subprocess) against a small stub shop.

The stub speaks the HTTP contract and can oversell on purpose, so these tests pin the
locustfile's own behaviour: the spike barrier, the response checks and the arrival log.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from loadtest import arrivals, locust_csv
from loadtest.phase import LOCUSTFILE, Plan, locust_command
from loadtest.verdict import PURCHASE_NAME
from tests.loadtest.stubshop import StubShop, serve

pytestmark = pytest.mark.timeout(120)


def run(tmp_path, shop, plan, *extra):
    with serve(shop) as url:
        command = locust_command(plan, url, tmp_path / "run", tmp_path / "arrivals.jsonl")
        done = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=100)
    assert "Traceback" not in done.stderr + done.stdout, done.stdout[-3000:]
    return done, locust_csv.read_stats(tmp_path / "run"), \
        arrivals.read_arrivals(tmp_path / "arrivals.jsonl")


def test_every_buyer_browses_then_buys_once_and_an_honest_sale_has_no_failures(tmp_path):
    shop = StubShop()
    done, stats, log = run(tmp_path, shop, Plan(users=40, stock=10, cap_s=60))
    assert done.returncode == 0, done.stdout[-2000:]
    assert stats["/api/products/[sku]"].requests == 40
    # a buyer whose page already showed "sold out" does not click buy
    assert stats[PURCHASE_NAME].requests == arrivals.buyers(log) <= 40
    assert stats[PURCHASE_NAME].failures == 0
    counts = arrivals.outcome_counts(log)
    assert counts["order"] == 10 and set(counts) <= {"order", "sold_out"}
    assert shop.audit()["consistent"]


def test_orders_beyond_the_stock_are_locust_failures(tmp_path):
    done, stats, log = run(tmp_path, StubShop(oversell=3), Plan(users=30, stock=10, cap_s=60))
    assert done.returncode == 1  # Locust's "some requests failed"
    assert stats[PURCHASE_NAME].failures == 3
    failures = (tmp_path / "run_failures.csv").read_text()
    assert "order beyond the stock of 10" in failures
    assert arrivals.outcome_counts(log)["order"] == 13


def test_the_barrier_releases_buyers_together_even_when_spawning_is_slow(tmp_path):
    # 30 users at 15/s take 2 s to spawn; without the barrier the first purchase would
    # leave about 2 s before the last. The bound is loose on purpose (a shared machine).
    done, _, log = run(tmp_path, StubShop(stock=50), Plan(users=30, stock=50, cap_s=60),
                       "-r", "15")
    first_attempts = [a.sent for a in log if a.attempt == 1]
    assert len(first_attempts) == 30
    assert max(first_attempts) - min(first_attempts) < 1.2


def test_the_flash_sale_shape_stops_once_the_sale_is_quiet_not_at_the_run_time_cap(tmp_path):
    done, _, _ = run(tmp_path, StubShop(), Plan(users=20, stock=5, cap_s=90))
    assert "every buyer browsed and nothing moved" in done.stderr + done.stdout


def test_the_flash_sale_shape_waits_for_purchases_still_waiting_for_their_lock(tmp_path):
    """Each section holds the lock longer than the shape's 2 s tail: the shape ended the
    run while buyers were still waiting, and a showdown reported `token` "sold 1"."""
    shop = StubShop(stock=2, section_s=2.5)
    done, stats, log = run(tmp_path, shop, Plan(users=4, stock=2, cap_s=60))
    assert "every buyer browsed and nothing moved" in done.stderr + done.stdout
    assert stats[PURCHASE_NAME].requests == 4 and len(log) == 4, done.stderr[-2000:]
    assert len(shop.orders) == 2


def test_purchases_still_waiting_when_the_run_stops_are_logged_as_cut_off(tmp_path):
    """Each section holds the lock past the 2 s cap: the buyers were killed mid-request
    and their attempts were in no log, so a showdown said "0 purchase attempts had no
    answer" of 4 still waiting at its cap (a showdown audit)."""
    done, _, log = run(tmp_path, StubShop(stock=2, section_s=4), Plan(users=2, stock=2,
                                                                      cap_s=2))
    assert arrivals.outcome_counts(log) == {"cut_off": 2}, done.stderr[-2000:]
    assert all(a.status == 0 and a.done >= a.sent for a in log)


def test_buyers_who_see_sold_out_on_the_page_do_not_buy_and_the_run_still_ends(tmp_path):
    done, stats, log = run(tmp_path, StubShop(stock=0), Plan(users=20, stock=0, cap_s=90))
    assert stats["/api/products/[sku]"].requests == 20 and log == []
    assert "every buyer browsed and nothing moved" in done.stderr + done.stdout


def test_the_locustfile_runs_a_single_user_for_debugging(tmp_path):
    shop = StubShop(stock=1)
    with serve(shop) as url:
        proc = subprocess.Popen([sys.executable, str(LOCUSTFILE), "--host", url],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # run_single_user never returns; the buyer's one order proves it ran
            deadline = time.monotonic() + 60
            while not shop.orders and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.1)
        finally:
            proc.kill()
            proc.wait(timeout=10)
    assert len(shop.orders) == 1


def test_sustained_buyers_only_buy_each_time_as_a_new_buyer(tmp_path):
    shop = StubShop(stock=100_000)
    done, stats, log = run(tmp_path, shop, Plan(users=10, mode="sustained", duration=3,
                                                busy_retries=0))
    assert "/api/products/[sku]" not in stats  # no browsing between purchases
    assert stats[PURCHASE_NAME].requests > 10 and len(log) > 10
    assert arrivals.buyers(log) == len(log)  # a fresh buyer id per purchase
    # a purchase still in flight when the run stops is logged as cut off (one a buyer)
    counts = arrivals.outcome_counts(log)
    assert set(counts) <= {"order", "cut_off"} and counts.get("cut_off", 0) <= 10, counts


def test_the_no_op_baseline_posts_like_a_purchase_and_logs_each_answer(tmp_path):
    shop = StubShop()
    done, stats, log = run(tmp_path, shop, Plan(users=10, mode="noop", duration=4))
    assert set(stats) == {"/api/noop", locust_csv.AGGREGATED}, set(stats)
    assert stats["/api/noop"].method == "POST"
    assert stats["/api/noop"].requests > 10 and stats["/api/noop"].failures == 0
    # the purchase's client work: one arrival per answer, a fresh buyer id each time
    counts = arrivals.outcome_counts(log)  # and the answers the run's end cut off
    assert set(counts) <= {"noop", "cut_off"} and counts.get("cut_off", 0) <= 10, counts
    # (Locust's CSV is written before its last second of requests: the log has them all)
    assert len(log) == arrivals.buyers(log) >= stats["/api/noop"].requests
    assert shop.orders == []


@pytest.mark.parametrize("mode", ["noop", "noop-get"])
def test_plain_locust_in_a_no_op_mode_asks_the_no_op_endpoint(tmp_path, mode):
    """Run as plain Locust (the README: ``locust -f loadtest/locustfile.py --host ...``),
    without the ``--seckill-noop-path`` the showdown passes, the no-op modes went to
    ``/healthz``: every POST a failure (the shop answers it 405), and the bare GET one
    that reads Redis and the database, no baseline at all."""
    shop = StubShop()
    with serve(shop) as url:
        command = locust_command(Plan(users=5, mode=mode, duration=4), url,
                                 tmp_path / "run", tmp_path / "arrivals.jsonl")
        at = command.index("--seckill-noop-path")
        del command[at:at + 2]
        done = subprocess.run(command, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    stats = locust_csv.read_stats(tmp_path / "run")
    assert stats["/api/noop"].requests > 5 and stats["/api/noop"].failures == 0
    assert set(shop.paths) == {"/api/noop"}, shop.paths


def test_the_old_baseline_is_a_bare_get_of_the_no_op_endpoint(tmp_path):
    # 4 s, not 2: under a loaded suite (load 6 on two cores) a 2 s run ended before its
    # users made a request (only the "Aggregated" row)
    done, stats, log = run(tmp_path, StubShop(), Plan(users=10, mode="noop-get", duration=4))
    assert set(stats) == {"/api/noop", locust_csv.AGGREGATED}, set(stats)
    assert stats["/api/noop"].method == "GET" and stats["/api/noop"].failures == 0
    assert log == []  # no client-side work beyond the request


def test_a_host_with_a_trailing_slash_as_seckill_serve_prints_its_url(tmp_path):
    # pasted from the serve's banner: every request went to ``//api/...``, refused by
    # the client (thousands of tracebacks, no request sent; a Locust audit)
    shop = StubShop(stock=5, oversell=2)
    with serve(shop) as url:
        command = locust_command(Plan(users=20, stock=5, cap_s=60), url + "/",
                                 tmp_path / "run", tmp_path / "arrivals.jsonl")
        done = subprocess.run(command, capture_output=True, text=True, timeout=100)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    stats = locust_csv.read_stats(tmp_path / "run")
    assert stats["/api/products/[sku]"].requests == 20
    assert stats[PURCHASE_NAME].failures == 2
    # one row for the orders past the stock, not one per unit
    failures = (tmp_path / "run_failures.csv").read_text()
    assert failures.count("order beyond the stock of 5") == 1, failures


SHAPE_RUNS_TWICE = """
import time
from types import SimpleNamespace
from loadtest import shapes

class Stats:
    total = SimpleNamespace(num_requests=20)
    def get(self, name, method):
        return SimpleNamespace(num_requests=10)

shape = shapes.FlashSaleShape()
shape.tail = 0.05
shape.runner = SimpleNamespace(stats=Stats(), environment=SimpleNamespace(
    parsed_options=SimpleNamespace(num_users=10, spawn_rate=10, run_time=None)))
first = shape.tick()
time.sleep(0.1)
over = shape.tick()  # every buyer browsed, nothing moved: over
shape.reset_time()  # the next swarm: the old counts stand until Locust clears them
print(first, over, shape.tick())
"""


def test_the_shape_counts_a_new_runs_quiet_afresh():
    # the web UI's second swarm ended at once on the first run's counts (a Locust
    # audit); in a process of its own: Locust patches the standard library on import
    done = subprocess.run([sys.executable, "-c", SHAPE_RUNS_TWICE], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split("\n")[-2] == "(10, 10.0) None (10, 10.0)", done.stderr[-2000:]
