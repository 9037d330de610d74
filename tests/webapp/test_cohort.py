"""Lock cohorting (``webapp/cohort.py``): passes within a worker, exclusion across workers.

The unit tests drive a ``Cohort`` (``lockpassing.py``, bounded by ``holdbound.py``)
with real threads and a recording lock; the two-process test runs two real processes
(``twoprocesses.py``), each with its own cohort, against one redis-server and one
SQLite file, and checks the books and that both processes sold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

from tests.webapp.conftest import (
    ADMIN_TOKEN,
    SKU,
    empty_shop,
    lock_held_at_stock_writes,
    make_app,
)
from tests.webapp.twoprocesses import (
    assert_holds_interleaved,
    sell_in_two_processes,
    tokens_by_process,
)
from webapp import sales
from webapp.cohort import CohortLock
from webapp.holdbound import HoldBound
from webapp.lockpassing import Cohort


class RecordingLock:
    """Stands in for a lockcore lock: counts acquisitions and releases."""

    def __init__(self, log: list[str], grant: bool = True, fencing_token: int = 1) -> None:
        self.log, self.grant, self.fencing_token = log, grant, fencing_token
        self.lost = False
        self.ttl_ms = 10_000

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        self.log.append("acquire")
        return self.grant

    def release(self) -> None:
        self.log.append("release")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def queued_behind(cohort: Cohort, holder: CohortLock, n: int, log: list[str]):
    """Start ``n`` threads that queue behind ``holder``; each records its fencing token."""
    tokens: list[int | None] = []
    started = threading.Barrier(n + 1)

    def buyer() -> None:
        handle = CohortLock(cohort, lambda: RecordingLock(log, fencing_token=len(log)))
        started.wait()
        assert handle.acquire(timeout=5)
        tokens.append(handle.fencing_token)
        handle.release()

    threads = [threading.Thread(target=buyer) for _ in range(n)]
    for thread in threads:
        thread.start()
    started.wait()
    while len(cohort._queue) < n:  # every buyer is queued before the holder lets go
        threading.Event().wait(0.001)
    return threads, tokens


def test_a_section_that_ends_with_a_buyer_queued_passes_the_lock_without_releasing_it():
    log: list[str] = []
    cohort = Cohort(max_passes=10, max_hold_s=60)
    holder = CohortLock(cohort, lambda: RecordingLock(log, fencing_token=7))
    assert holder.acquire(timeout=1)
    threads, tokens = queued_behind(cohort, holder, 3, log)
    holder.release()
    for thread in threads:
        thread.join(5)
    assert log == ["acquire", "release"]  # one acquisition for four sections
    assert tokens == [7, 7, 7]  # they share its fencing token
    assert (cohort.acquisitions, cohort.passes) == (1, 3)


def test_after_max_passes_the_cohort_releases_and_the_next_buyer_acquires_again():
    log: list[str] = []
    cohort = Cohort(max_passes=2, max_hold_s=60)
    holder = CohortLock(cohort, lambda: RecordingLock(log))
    assert holder.acquire(timeout=1)
    threads, _ = queued_behind(cohort, holder, 4, log)
    holder.release()
    for thread in threads:
        thread.join(5)
    assert log == ["acquire", "release", "acquire", "release"]
    assert (cohort.acquisitions, cohort.passes) == (2, 3)


def test_a_hold_older_than_max_hold_is_released_not_passed():
    log: list[str] = []
    clock = Clock()
    cohort = Cohort(max_passes=100, max_hold_s=0.02, monotonic=clock)
    holder = CohortLock(cohort, lambda: RecordingLock(log))
    assert holder.acquire(timeout=1)
    threads, _ = queued_behind(cohort, holder, 1, log)
    clock.now += 0.021
    holder.release()
    threads[0].join(5)
    assert log == ["acquire", "release", "acquire", "release"] and cohort.passes == 0


def test_a_lost_lock_is_released_not_passed():
    log: list[str] = []
    cohort = Cohort(max_passes=100, max_hold_s=60)
    holder = CohortLock(cohort, lambda: RecordingLock(log))
    assert holder.acquire(timeout=1)
    threads, _ = queued_behind(cohort, holder, 1, log)
    holder.held.lost = True  # the watchdog found it gone
    holder.release()
    threads[0].join(5)
    assert cohort.passes == 0 and log.count("acquire") == 2


def test_a_busy_cohort_refuses_a_non_blocking_acquire_and_times_out_a_blocking_one():
    log: list[str] = []
    cohort = Cohort(max_passes=10, max_hold_s=60)
    holder = CohortLock(cohort, lambda: RecordingLock(log))
    assert holder.acquire(timeout=1)
    assert not CohortLock(cohort, lambda: RecordingLock(log)).acquire(blocking=False)
    assert not CohortLock(cohort, lambda: RecordingLock(log)).acquire(timeout=0.05)
    assert not cohort._queue  # the one that timed out left the queue
    holder.release()
    assert log == ["acquire", "release"]


@pytest.mark.parametrize("failure", ["refused", "raised"])
def test_a_head_that_cannot_get_the_lock_lets_the_next_buyer_lead(failure):
    log: list[str] = []
    cohort = Cohort(max_passes=10, max_hold_s=60)
    gate = threading.Event()

    def failing_lock() -> RecordingLock:
        gate.wait(5)  # the second buyer queues while the first is still trying
        if failure == "raised":
            raise ConnectionError("redis down")
        return RecordingLock(log, grant=False)

    first = CohortLock(cohort, failing_lock)
    second = CohortLock(cohort, lambda: RecordingLock(log))
    with ThreadPoolExecutor(2) as pool:
        tried = pool.submit(lambda: first.acquire(timeout=1))
        while not cohort._busy:
            threading.Event().wait(0.001)
        waited = pool.submit(lambda: second.acquire(timeout=5))
        while not cohort._queue:
            threading.Event().wait(0.001)
        gate.set()
        if failure == "raised":
            with pytest.raises(ConnectionError):
                tried.result(5)
        else:
            assert tried.result(5) is False
        assert waited.result(5) is True
    second.release()
    assert not cohort._busy


def test_releasing_a_handle_that_holds_nothing_raises_like_a_lock():
    from lockcore import LockNotOwned

    with pytest.raises(LockNotOwned):
        CohortLock(Cohort(1, 1), lambda: RecordingLock([])).release()


# -- two real processes, one redis-server, one SQLite file ---------------------------
BUYERS_PER_PROCESS, STOCK = 60, 100


def _sell_in_a_process(database_url: str, redis_url: str, name: str,
                       ready: Callable[[], None]) -> tuple[Any, ...]:
    app = make_app(database_url, redis_url, LOCK_COHORT=True, LOCK_COMBINE=False,
                   LOCK_TIMEOUT_S=20.0)
    ready()
    with ThreadPoolExecutor(16) as pool:
        def buy(n: int) -> int:
            return app.test_client().post(f"/api/products/{SKU}/purchase",
                                          json={"user_id": f"{name}-{n}"}).status_code
        statuses = list(pool.map(buy, range(BUYERS_PER_PROCESS)))
    cohort = app.extensions["seckill"].cohorts._by_key
    app.extensions["seckill"].close()
    return (name, statuses, sum(c.acquisitions for c in cohort.values()),
            sum(c.passes for c in cohort.values()))


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_two_worker_processes_with_cohorts_sell_exactly_the_stock_and_both_sell(
        sqlite_url, redis_url, redis_client, strategy):
    app = make_app(sqlite_url, redis_url)
    empty_shop(app)
    shop = app.extensions["seckill"]
    sales.create_product(shop.sessions, SKU, "Keyboard", 4_900, stock=STOCK, strategy=strategy)
    client = app.test_client()
    # work inside the section widens the read-modify-write race: a broken exclusion oversells
    assert client.put(f"/api/admin/sales/{SKU}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                      json={"stock": STOCK, "strategy": strategy, "work_ms": 3}).status_code == 200
    # together: started apart, one process could sell its 60 before the other bought,
    # and neither a broken exclusion nor an unbounded cohort showed (a test audit)
    got = sell_in_two_processes(_sell_in_a_process, sqlite_url, redis_url, together=True)
    audit = client.get(f"/api/sales/{SKU}/audit").get_json()
    tokens = tokens_by_process(shop.sessions, SKU)
    shop.close()
    sold = {name: statuses.count(201) for name, statuses, _, _ in got}
    assert all(set(statuses) <= {201, 409} for _, statuses, _, _ in got), got
    assert sum(sold.values()) == audit["units_sold"] == STOCK, (sold, audit)
    assert audit["consistent"] and audit["oversold"] == 0, audit
    # 60 buyers a process, 100 units: each sells at least 40 whatever the bound does;
    # the bound shows in the holds: a cohort let go while its own buyers still queued,
    # and the other process's cohort held the lock in between
    assert_holds_interleaved(tokens)
    assert sum(passes for *_, passes in got) > 0  # and the cohorts did pass the lock


def test_the_interleaving_check_catches_processes_that_held_the_lock_one_after_the_other():
    # the check above must be able to fail: one hold each, or all of one process's
    # holds before the other's, is selling in turn, never contending
    for apart in ({"w1": {3}, "w2": {4}}, {"w1": {1, 2, 3}, "w2": {4, 5}}):
        with pytest.raises(AssertionError, match="one after the other"):
            assert_holds_interleaved(apart)
    assert_holds_interleaved({"w1": {1, 3}, "w2": {2}})


@pytest.mark.parametrize("strategy, cohorted", [
    ("token", True), ("fair", True), ("redlock", True),
    ("multi", False),  # it also locks the buyer: its lock cannot go to another buyer
    ("naive", False), ("setnx", False), ("local", False),  # must keep failing as taught
])
def test_only_safe_single_resource_locks_join_a_cohort_and_only_when_switched_on(
        sqlite_url, redis_url, redlock_cluster, strategy, cohorted):
    from webapp import locks
    from webapp.saleinfo import SaleInfo

    sale = SaleInfo(1, SKU, strategy, 0, 1, 10)
    for switch in (True, False):
        app = make_app(sqlite_url, redis_url, LOCK_COHORT=switch, LOCK_COMBINE=False,
                       REDLOCK_URLS=redlock_cluster.urls)
        lock = locks.lock_for(app.extensions["seckill"], sale, "ann")
        assert isinstance(lock, CohortLock) is (switch and cohorted), (strategy, switch)
        app.extensions["seckill"].close()


@pytest.mark.parametrize("strategy, max_batch", [("token", 256), ("redlock", 256),
                                                 ("fair", 64)])
def test_a_combined_section_is_smaller_for_the_fifo_lock(sqlite_url, redis_url,
                                                         redlock_cluster, strategy, max_batch):
    from webapp import locks
    from webapp.saleinfo import SaleInfo

    app = make_app(sqlite_url, redis_url, REDLOCK_URLS=redlock_cluster.urls)
    lock = locks.lock_for(app.extensions["seckill"], SaleInfo(1, SKU, strategy, 0, 1, 10),
                          "ann")
    assert lock.combiner.max_batch == max_batch
    app.extensions["seckill"].close()


def test_a_hold_older_than_a_quarter_of_the_ttl_is_not_passed_on():
    now = [0.0]
    bound = HoldBound(max_passes=64, max_hold_s=1.0, monotonic=lambda: now[0])
    lock = SimpleNamespace(ttl_ms=400, lost=False)  # a quarter: 100 ms
    bound.start()
    now[0] = 0.05
    assert bound.take_pass(lock)  # young: 50 ms of 100
    now[0] = 0.15
    assert not bound.take_pass(lock)  # past a quarter of the TTL, under max_hold_s
    assert bound.take_pass(SimpleNamespace(lost=False))  # no TTL: only max_hold_s bounds


def test_a_turn_handed_the_lock_as_its_wait_runs_out_takes_it(monkeypatch):
    """Given up instead, the passed lock was never released and the cohort stayed busy:
    every later buyer of that worker heard 503 until it restarted, and the distributed
    lock stayed held (``lockpassing.py``'s second timeline; a mutation audit)."""
    from tests.webapp.racing import WaitTimesOutAtTheHandOver
    from webapp import lockpassing

    class RacingTurn(lockpassing._Turn):
        __slots__ = ()

        def __init__(self) -> None:
            self.event, self.lock = WaitTimesOutAtTheHandOver(), None

    monkeypatch.setattr(lockpassing, "_Turn", RacingTurn)
    log: list[str] = []
    cohort = Cohort(max_passes=10, max_hold_s=60)
    holder = CohortLock(cohort, lambda: RecordingLock(log))
    assert holder.acquire(timeout=1)
    got: list[bool] = []
    buyer = CohortLock(cohort, lambda: RecordingLock(log))
    thread = threading.Thread(target=lambda: got.append(buyer.acquire(timeout=0.1)))
    thread.start()
    while not cohort._queue:
        threading.Event().wait(0.001)
    holder.release()  # passed to the buyer, whose wait is running out
    thread.join(5)
    assert got == [True]
    buyer.release()
    assert log == ["acquire", "release"] and not cohort._busy


def test_a_pass_is_refused_when_redlock_validity_is_short():
    """A RedLock's validity runs on its own clock; a hold whose validity is nearly gone
    (a slow acquisition, drift) must not be passed on, or the passed section runs after
    the lock expired (a mutation audit dropped the check; nothing noticed)."""
    clock = Clock()
    bound = HoldBound(max_passes=10, max_hold_s=1.0, monotonic=clock)
    bound.start()
    lock = RecordingLock([])
    lock.remaining_validity_ms = lambda: 5_000  # type: ignore[attr-defined]
    assert bound.take_pass(lock)  # hold bound: min(1 s, ttl/4 = 2.5 s); 5 s > 2 x 1 s
    lock.remaining_validity_ms = lambda: 1_500  # type: ignore[attr-defined]
    assert not bound.take_pass(lock)  # under twice the hold: release instead


def test_a_passed_turn_finds_the_lock_when_it_wakes(monkeypatch):
    """The lock is set on the turn before its event: woken first, a thread read no lock,
    led, and blocked on the distributed lock its own process held (a mutation audit)."""
    from webapp import lockpassing

    seen: list[Any] = []

    class Recorded:
        def __init__(self, turn: Any) -> None:
            self.turn, self.real = turn, threading.Event()

        def set(self) -> None:
            seen.append(self.turn.lock)  # what a thread woken right now would read
            self.real.set()

        def wait(self, timeout: float | None = None) -> bool:
            return self.real.wait(timeout)

    class RecordedTurn(lockpassing._Turn):
        __slots__ = ()

        def __init__(self) -> None:
            self.lock, self.event = None, Recorded(self)

    monkeypatch.setattr(lockpassing, "_Turn", RecordedTurn)
    log: list[str] = []
    cohort = Cohort(max_passes=10, max_hold_s=60)
    holder = CohortLock(cohort, lambda: RecordingLock(log))
    assert holder.acquire(timeout=1)
    buyer = CohortLock(cohort, lambda: RecordingLock(log))
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(buyer.acquire(timeout=5)))
    thread.start()
    while not cohort._queue:
        threading.Event().wait(0.001)
    holder.release()
    thread.join(5)
    assert got == [True] and seen and seen[0] is not None
    buyer.release()


def test_a_lock_taken_for_the_sale_before_a_reset_is_not_passed_to_the_new_sales_work(
        sqlite_url, redis_url, redis_client, monkeypatch):
    """Cohorting alone (``lockedpath.py``): the reset that raised work_ms holds the lock
    while a buyer of the old sale leads the cohort and one of the new sale queues behind
    it. The first took the lock with the old sale's TTL (1000 + 2 x 0 ms) and, its
    section over at once, passed it on: the new sale's 1.5 s of work ran under a lock
    that expired after 1 s, for another worker to take (``locks.local_queue``)."""
    import lockcore
    from webapp import lockedpath

    app = make_app(sqlite_url, redis_url, LOCK_COHORT=True, LOCK_COMBINE=False,
                   LOCK_TTL_MS=1_000, LOCK_COHORT_MAX_MS=1_000, LOCK_TIMEOUT_S=20.0)
    empty_shop(app)
    shop = app.extensions["seckill"]
    sales.create_product(shop.sessions, SKU, "Keyboard", 4_900, stock=6, strategy="token")
    sales.reset_sale(shop.sessions, shop.redis, SKU, stock=6, strategy="token", limit=1)
    def waiting() -> int:  # a leader trying for the lock, or a turn queued behind one
        return sum(len(cohort._queue) + (cohort._trying is not None)
                   for cohort in shop.cohorts._by_key.values())

    def until(count: int) -> None:
        while waiting() < count:
            threading.Event().wait(0.001)

    def post(user: str) -> int:
        return app.test_client().post(f"/api/products/{SKU}/purchase",
                                      json={"user_id": user}).status_code

    held_at_write = lock_held_at_stock_writes(monkeypatch, redis_client, lockedpath)
    reset = lockcore.create("token", redis_client, f"stock:{SKU}", ttl_ms=20_000)
    assert reset.acquire(blocking=False)  # the admin reset's hold
    with ThreadPoolExecutor(2) as pool:
        old = pool.submit(post, "old")  # looked the old sale up: leads, waits
        until(1)
        sales.reset_sale(shop.sessions, shop.redis, SKU, stock=6, strategy="token",
                         work_ms=1_500, limit=1)  # what the reset does under the lock
        new = pool.submit(post, "new")
        until(2)
        reset.release()
        statuses = [old.result(20), new.result(20)]
    assert statuses[1] == 201, statuses
    assert held_at_write and all(held_at_write), held_at_write  # never written unlocked
    shop.close()
