"""Sustained mode's rates: counted over the steady window, only successful purchases."""

from __future__ import annotations

import argparse

from loadtest import showdown, sustained
from loadtest.arrivals import Arrival
from loadtest.locust_csv import HistoryPoint


def arrival(sent: float, outcome: str = "order") -> Arrival:
    return Arrival("buyer", 1, sent, sent + 0.1, 201 if outcome == "order" else 503, outcome)


def test_purchases_per_second_leave_out_the_warm_up_and_count_only_orders():
    slow_start = [arrival(0.0)]  # one purchase while 1000 users were still connecting
    steady = [arrival(2.0 + i / 100) for i in range(800)]  # 100 orders/s for 8 s
    busy = [arrival(2.0 + i / 100, "busy") for i in range(800)]
    rate = sustained.orders_per_s(slow_start + steady + busy + [arrival(11.0)])
    assert rate is not None and 95 <= rate <= 105, rate


def test_a_run_with_no_attempts_has_no_rate():
    assert sustained.orders_per_s([]) is None


def test_the_baseline_counts_requests_after_the_warm_up_and_before_the_last_second():
    counts = [0, 100, 1100, 2100, 3100, 4100, 4200]  # a ramp, 1000/s, a tail cut short
    points = [HistoryPoint(t, 1000, n) for t, n in enumerate(counts, start=50)]
    assert sustained.requests_per_s(points, fallback=-1.0) == 1000.0


def test_the_baseline_falls_back_to_locusts_average_when_the_history_is_too_short():
    assert sustained.requests_per_s([HistoryPoint(1, 10, 5)], fallback=42.0) == 42.0


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    showdown.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_sustained_mode_simulates_no_work_by_default_and_the_flash_sale_does():
    # 20 ms inside a critical section caps any lock at 50 purchases/s by construction
    assert showdown.plan_from(parse("--sustained")).work_ms == 0
    assert showdown.plan_from(parse("--sustained")).users == 1000
    assert showdown.plan_from(parse()).work_ms == 20
    assert showdown.plan_from(parse("--sustained", "--work-ms", "5")).work_ms == 5
