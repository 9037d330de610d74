"""The showdown's verdicts, figure by figure: each of a purchase's answers and each of a
phase's figures alone decides what the table says and whether the run fails. A mutation
audit broke each of these checks (a lost order never counted; an inconsistent audit
alone read "ok"; a crashed unsafe phase exited 0; "500 busy" judged a correct refusal)
and no test noticed: the lab would have lied."""

from __future__ import annotations

import pytest

from loadtest import verdict
from loadtest.compare import (
    FAIL,
    OK,
    TAUGHT,
    StrategyResult,
    exact_unsafe_note,
    failed,
    unsold_notes,
)


@pytest.mark.parametrize("status, code", [
    (500, "busy"), (409, "busy"), (503, "sold_out"), (200, "sold_out"),
    (400, "already_purchased"), (502, "busy"),
])
def test_a_refusal_code_under_the_wrong_status_is_a_failure(status, code):
    # V3: the contract pairs each refusal with its status; "500 busy" is a shop breaking
    judged = verdict.judge_purchase(status, {"error": code}, "alice")
    assert judged.outcome == "error" and judged.failure, judged


@pytest.mark.parametrize("quantity", ["1", 1.0, None, [1]])
def test_an_order_whose_quantity_is_not_an_integer_is_a_failure_not_a_crash(quantity):
    # V1: the isinstance guard; without it "1" < 1 raises TypeError inside the buyer
    body = {"order_id": 7, "sku": "sku-1", "user_id": "alice", "quantity": quantity}
    judged = verdict.judge_purchase(201, body, "alice")
    assert judged.outcome == "error" and "not a positive integer" in (judged.failure or "")


def sale(safe: bool = True, **figures) -> StrategyResult:
    base = dict(users=100, stock=10, sold=10, consistent=True)
    return StrategyResult("token", safe, **{**base, **figures})


@pytest.mark.parametrize("wrong", [
    {"lost": 1}, {"duplicates": 1}, {"oversold": 1}, {"consistent": False},
])
def test_each_wrong_figure_alone_fails_a_safe_lock_and_is_taught_for_an_unsafe_one(wrong):
    # C1-C4: every one of the four checks alone decides the verdict (a safe lock that
    # only lost an order, with the books otherwise consistent, said "ok")
    assert sale(True, **wrong).verdict == FAIL
    assert sale(False, **wrong).verdict == TAUGHT
    assert failed([sale(True, **wrong)]) != [] and failed([sale(False, **wrong)]) == []


def test_an_unsafe_strategys_broken_run_still_fails_the_showdown():
    # C5/C7: failed() lists an ERROR of any strategy, not only of a safe one
    crashed = StrategyResult("naive", False, users=100, stock=10,
                             error="Locust made no requests")
    assert failed([crashed]) == [crashed]


def test_an_empty_sale_with_buyers_is_not_nothing_sold():
    # C6: stock 0 sells nothing and is right to
    empty = StrategyResult("token", True, users=100, stock=0, sold=0, consistent=True)
    assert empty.verdict == OK and failed([empty]) == []


def test_orders_no_buyer_heard_of_are_noted_even_without_errors():
    # C8: unconfirmed orders alone (the buyers' answers all documented) are noted
    r = sale(unconfirmed=2, outcomes={"order": 8, "sold_out": 90})
    notes = unsold_notes([r])
    assert any("2 orders were made that no buyer was told about" in n for n in notes), notes


def test_a_sale_short_of_its_stock_with_no_busy_answer_has_no_unsold_note():
    # C9: the unsold note names busy answers as the cause: none, no note
    r = sale(sold=6, outcomes={"order": 6, "sold_out": 94})
    assert not any("unsold" in n for n in unsold_notes([r]))


def test_an_unsafe_strategy_that_stayed_exact_is_explained_under_the_table():
    # "safe NO" beside "ok" read as a contradiction (a demo audit): a note names them
    exact = StrategyResult("getset", False, users=100, stock=10, sold=10, consistent=True)
    broke = StrategyResult("naive", False, users=100, stock=10, sold=90, oversold=80)
    safe = StrategyResult("token", True, users=100, stock=10, sold=10, consistent=True)
    (note,) = exact_unsafe_note([exact, broke, safe])
    assert note.startswith("note: getset: unsafe, yet exact in this run"), note
    assert exact_unsafe_note([broke, safe]) == []


def test_a_phase_that_crashed_is_an_error_even_though_it_sold_nothing():
    # C13: ERROR comes before NOTHING SOLD: a crashed phase (Locust made no requests,
    # its plan's users and stock set) must not read as a lock server down
    crashed = StrategyResult("token", True, users=100, stock=10, sold=0,
                             error="Locust made no requests")
    assert crashed.verdict == "ERROR"


def test_orders_buyers_were_told_of_that_the_audit_lacks_are_lost():
    # C10: phase._read_audit's ``lost`` (buyers told 201 without an order); never
    # computed, a safe lock that answered 201 without writing the row read "ok"
    from loadtest.arrivals import Arrival
    from loadtest.phase import _read_audit

    told = [Arrival(f"u{i}", 1, 0.0, 0.1, 201, "order") for i in range(3)]
    refused = [Arrival("u9", 1, 0.0, 0.1, 409, "sold_out")]
    r = StrategyResult("token", True, users=4, stock=3)
    _read_audit(r, {"units_sold": 2, "orders": 2, "oversold": 0, "duplicate_buyers": 0,
                    "consistent": True}, told + refused, {"u0", "u1"})
    assert (r.sold, r.lost, r.unconfirmed) == (2, 1, 0)
    assert r.verdict == FAIL and failed([r]) == [r]


def test_a_lost_order_and_an_unconfirmed_one_do_not_cancel_out():
    # counted (201s minus orders, and back), one of each read "lost 0, unconfirmed 0"
    from loadtest.arrivals import Arrival
    from loadtest.phase import _read_audit

    told = [Arrival(f"u{i}", 1, 0.0, 0.1, 201, "order") for i in range(3)]
    no_answer = [Arrival("u3", 1, 0.0, 30.0, 0, "error")]
    r = StrategyResult("token", True, users=4, stock=3)
    _read_audit(r, {"units_sold": 3, "orders": 3, "oversold": 0, "duplicate_buyers": 0,
                    "consistent": True}, told + no_answer, {"u0", "u1", "u3"})
    assert (r.lost, r.unconfirmed, r.verdict) == (1, 1, FAIL)


def test_buyers_that_disagree_with_the_audits_orders_leave_the_phase_without_a_verdict():
    from loadtest.phase import PhaseBroken, _read_audit

    r = StrategyResult("token", True, users=4, stock=3)
    with pytest.raises(PhaseBroken, match="lists 1 buyers with an order and its audit "
                                          "counts 2 orders"):
        _read_audit(r, {"units_sold": 2, "orders": 2, "oversold": 0,
                        "duplicate_buyers": 0, "consistent": True}, [], {"u0"})


def test_buyers_cut_off_at_the_cap_are_named_and_counted_as_served_when_the_shop_served_them():
    """A showdown audit: 10 buyers, 10 units, 5 s sections; 6 were told 201 and 4 were
    still waiting for the lock at the 35 s cap, served after it. The note said "0
    purchase attempts had no answer ... 4 orders were made that no buyer was told
    about", and fairness read 0.60 though the first 10 buyers got the 10 units."""
    from loadtest import arrivals
    from loadtest.arrivals import Arrival
    from loadtest.phase import _read_audit

    told = [Arrival(f"u{i}", 1, float(i), 5.0 * i, 201, "order") for i in range(6)]
    waiting = [Arrival(f"u{i}", 2, 25.5, 35.0, 0, "cut_off") for i in range(6, 10)]
    busy = [Arrival(f"u{i}", 1, float(i), 25.0, 503, "busy") for i in range(6, 10)]
    tried = sorted(told + busy + waiting, key=lambda a: a.sent)
    r = StrategyResult("token", True, users=10, stock=10)
    r.outcomes = arrivals.outcome_counts(tried)
    late = _read_audit(r, {"units_sold": 10, "orders": 10, "oversold": 0,
                           "duplicate_buyers": 0, "consistent": True},
                       tried, {f"u{i}" for i in range(10)})
    r.fairness = arrivals.fairness(tried, 10, late)
    r.sell_out_s = arrivals.time_to_sell_out(tried, 10)
    assert (r.unconfirmed, r.served_after_cap, r.fairness, r.verdict) == (4, 4, 1.0, OK)
    (note,) = unsold_notes([r])
    assert note.startswith("note: token: 4 purchase attempts were still waiting at the "
                           "cap, and the shop made 4 of those orders after it"), note
    assert "sell-out is -" in note
