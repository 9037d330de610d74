"""The buyer's judgement of each purchase answer, and the arrival-log arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest import arrivals, verdict
from loadtest.arrivals import Arrival

ORDER_BODY = {"order_id": 7, "sku": "sku-1", "user_id": "alice", "quantity": 1}


def test_an_order_for_the_buyer_is_not_a_failure():
    assert verdict.judge_purchase(201, ORDER_BODY, "alice") == verdict.Verdict("order", None)


def test_the_no_op_baseline_is_judged_on_its_status_and_body():
    assert verdict.judge_noop(200, {"ok": True}, "alice") == verdict.Verdict("noop", None)
    assert verdict.judge_noop(200, {}, "alice").failure is not None
    assert verdict.judge_noop(200, None, "alice").failure is not None
    assert "HTTP 503" in (verdict.judge_noop(503, {"ok": True}, "alice").failure or "")


@pytest.mark.parametrize("status, code, outcome", [
    (409, "sold_out", "sold_out"),
    (409, "already_purchased", "already_purchased"),
    (503, "busy", "busy"),
])
def test_documented_refusals_are_outcomes_not_failures(status, code, outcome):
    judged = verdict.judge_purchase(status, {"error": code, "detail": "x"}, "alice")
    assert judged == verdict.Verdict(outcome, None)


@pytest.mark.parametrize("status, body, reason", [
    (500, {"error": "internal", "detail": "boom"}, "unexpected HTTP 500 internal"),
    (500, None, "unexpected HTTP 500 without a JSON error body"),
    (409, {"error": "conflict"}, "unexpected HTTP 409 conflict"),
    (0, None, "no HTTP response"),
    (201, "not json", "order response is not a JSON object"),
    (201, {"order_id": 1, "sku": "sku-1", "user_id": "alice"}, "lacks quantity"),
    (201, {**ORDER_BODY, "user_id": "mallory"}, "not for buyer"),
    (201, {**ORDER_BODY, "quantity": 0}, "not a positive integer"),
])
def test_wrong_answers_are_failures_with_a_reason(status, body, reason):
    judged = verdict.judge_purchase(status, body, "alice")
    assert judged.outcome == "error"
    assert judged.failure is not None and reason in judged.failure


def test_an_order_past_the_stock_is_flagged_as_an_oversell():
    tally = verdict.OrderTally(stock=2)
    assert tally.record(1).failure is None
    assert tally.record(1).failure is None
    assert tally.record(1).failure == "order beyond the stock of 2"


def test_an_unknown_stock_never_flags_an_oversell():
    tally = verdict.OrderTally(stock=None)
    assert all(tally.record(1).failure is None for _ in range(1000))


def _arrival(user, sent, outcome, attempt=1):
    return Arrival(user, attempt, sent, sent + 0.5, 201 if outcome == "order" else 409, outcome)


def test_fairness_is_the_share_of_the_earliest_buyers_who_got_a_unit():
    log = [_arrival("a", 1.0, "busy"), _arrival("b", 2.0, "order"),
           _arrival("c", 3.0, "order"), _arrival("d", 4.0, "sold_out"),
           _arrival("a", 5.0, "order", attempt=2)]
    # first two buyers to arrive are a (won on retry) and b: both served
    assert arrivals.fairness(sorted(log, key=lambda a: a.sent), first_n=2) == 1.0
    # the first three are a, b, c: all served; d is fourth
    assert arrivals.fairness(log, first_n=4) == 0.75


def test_a_late_buyer_overtaking_an_early_one_lowers_fairness():
    log = [_arrival("early", 1.0, "sold_out"), _arrival("late", 2.0, "order")]
    assert arrivals.fairness(log, first_n=1) == 0.0


def test_a_buyer_who_came_first_and_won_on_a_retry_counts_by_their_first_attempt():
    # catches ranking buyers by their last attempt: a came first (busy, then an order at
    # t=4), so the first two buyers are a and b, both served (1.0); ranked by the last
    # attempt they were b and c, and c's sold_out read as unfair (0.5)
    log = [_arrival("a", 1.0, "busy"), _arrival("b", 2.0, "order"),
           _arrival("c", 3.0, "sold_out"), _arrival("a", 4.0, "order", attempt=2)]
    assert arrivals.fairness(log, first_n=2) == 1.0


def test_time_to_sell_out_runs_from_the_first_attempt_to_the_last_unit_sold():
    log = [_arrival("a", 10.0, "order"), _arrival("b", 10.2, "order"),
           _arrival("c", 10.4, "sold_out")]
    assert arrivals.time_to_sell_out(log, stock=2) == pytest.approx(0.7)
    assert arrivals.time_to_sell_out(log, stock=3) is None


def test_the_arrival_log_round_trips_through_jsonl(tmp_path):
    path = tmp_path / "log.jsonl"
    arrivals.write_arrivals(path, [_arrival("b", 2.0, "order")])
    arrivals.write_arrivals(path, [_arrival("a", 1.0, "busy")])  # a second worker appends
    assert [a.user for a in arrivals.read_arrivals(path)] == ["a", "b"]
    assert arrivals.read_arrivals(tmp_path / "missing.jsonl") == []


def test_an_arrival_log_written_by_locust_reads_back_with_its_outcomes():
    log = arrivals.read_arrivals(Path(__file__).parent / "fixtures" / "flash_arrivals.jsonl")
    assert arrivals.buyers(log) == 50
    assert arrivals.outcome_counts(log) == {"order": 12, "sold_out": 38}  # stub oversold 2
    assert arrivals.time_to_sell_out(log, stock=10) is not None
