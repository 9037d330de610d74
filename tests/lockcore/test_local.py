"""local: exclusive between threads, and no exclusion at all between processes."""

from __future__ import annotations

import threading

import pytest

import lockcore
from tests.lockcore.processes import holders

pytestmark = pytest.mark.timeout(60)


def test_two_processes_both_hold_the_same_local_lock_at_once():
    # Seed 000's lesson, executable: each gunicorn worker has its own dict of locks.
    spec = {"mode": "hold", "strategy": "local", "backend": None, "resource": "stock:sku-1"}
    with holders(spec, spec) as (first, second):
        one, two = first.read(), second.read()
        assert one["held"] and two["held"], "both processes should believe they hold it"
        first.send("check")
        second.send("check")
        assert first.read()["held"] and second.read()["held"]


def test_threads_of_one_process_take_turns():
    first = lockcore.create("local", None, "local-threads")
    second = lockcore.create("local", None, "local-threads")
    assert first.acquire()
    assert second.acquire(blocking=False) is False
    first.release()
    assert second.acquire(blocking=False)
    second.release()


def test_notify_waiter_wakes_when_the_holder_releases():
    """The waiter must be blocked in its wait when the holder lets go: released at once
    after ``start()``, the waiter's first try usually found the lock free, and a
    notify-waiter that never woke passed (a test audit: it slept out its timeout)."""
    holder = lockcore.create("local", None, "local-notify")
    waiter = lockcore.create("local", None, "local-notify", wait="notify")
    assert holder.acquire()
    blocked = threading.Event()
    real_wait = waiter.waiter.wait

    def wait(lock, remaining, attempt):
        blocked.set()
        real_wait(lock, remaining, attempt)

    waiter.waiter.wait = wait  # type: ignore[method-assign]
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=30)),
                              daemon=True)
    thread.start()
    assert blocked.wait(10), "the waiter never waited"
    holder.release()
    thread.join(timeout=10)  # a waiter not woken by the release sleeps its 30 s
    assert got == [True]
    waiter.release()


def test_local_lock_has_no_ttl_and_no_watchdog():
    with pytest.raises(ValueError, match="watchdog"):
        lockcore.create("local", None, "local-dog", watchdog=True)
    assert lockcore.create("local", None, "local-ttl").ttl_ms is None


def test_a_timeout_past_a_year_is_a_value_error_not_an_overflow_of_a_threading_wait():
    """``threading`` refuses a wait past ``TIMEOUT_MAX`` (292 years) with
    ``OverflowError``: a notify-waiter's ``acquire(timeout=1e10)`` raised it, and so
    did a second thread's on a shared handle (a lockcore audit). A timeout is a
    duration like any other option: up to a year, None for no limit."""
    holder = lockcore.create("local", None, "long-timeout")
    waiter = lockcore.create("local", None, "long-timeout", wait="notify")
    assert holder.acquire()
    try:
        with pytest.raises(ValueError, match="a year"):
            waiter.acquire(timeout=1e10)
        raised: list[BaseException] = []

        def second_thread() -> None:
            try:
                holder.acquire(timeout=1e10)  # the handle is another thread's: waits
            except BaseException as exc:  # judged below
                raised.append(exc)

        thread = threading.Thread(target=second_thread)
        thread.start()
        thread.join(10)
        assert len(raised) == 1 and isinstance(raised[0], ValueError), raised
        with pytest.raises(ValueError, match="a year"):
            lockcore.create("local", None, "long-timeout", timeout=1e10)
    finally:
        holder.release()
    assert waiter.acquire(timeout=365 * 24 * 3600.0)  # a year itself is taken
    waiter.release()


def test_names_no_handle_uses_any_more_are_forgotten():
    """Every name ever locked stayed in a process-wide dict: 100,000 names, 22 MB
    (a lockcore audit)."""
    import gc

    from lockcore.strategies import local

    for i in range(1_000):
        with lockcore.create("local", None, f"forgotten-{i}"):
            pass
    gc.collect()
    assert not [name for name in local._slots if name.startswith("forgotten-")]


def test_handles_of_one_name_share_its_lock_while_any_of_them_lives():
    holder = lockcore.create("local", None, "shared-slot")
    assert holder.acquire(blocking=False)
    for _ in range(3):  # handles made and dropped meanwhile see the holder
        assert not lockcore.create("local", None, "shared-slot").acquire(blocking=False)
    holder.release()
    assert lockcore.create("local", None, "shared-slot").acquire(blocking=False)


def test_a_handle_dropped_while_it_held_the_lock_lets_go_even_with_a_waiter_about():
    import gc

    waiter = lockcore.create("local", None, "dropped-holder")  # keeps the name's slot
    dropped = lockcore.create("local", None, "dropped-holder")
    assert dropped.acquire(blocking=False)
    assert not waiter.acquire(blocking=False)
    del dropped
    gc.collect()
    assert waiter.acquire(timeout=1.0)  # it waited for ever
    waiter.release()


def test_a_collection_while_the_guard_is_held_can_let_a_dropped_holder_go():
    """A new name's slot is made under the module's guard, and that allocation may run
    a cyclic collection, which runs the finalizer of a held handle dropped in a cycle,
    which takes the guard too: with a plain Lock every ``local`` lock of the process
    hung (a review)."""
    import gc
    import threading

    from lockcore.strategies import local

    class Owner:
        lock: object = None

    dropped = lockcore.create("local", None, "collected-under-the-guard")
    assert dropped.acquire(blocking=False)
    owner = Owner()
    owner.lock, dropped.owner = dropped, owner  # a cycle: only the collector frees it
    del dropped, owner
    done = threading.Event()

    def collect_under_the_guard() -> None:
        with local._guard:
            gc.collect()
        done.set()

    worker = threading.Thread(target=collect_under_the_guard, daemon=True)
    worker.start()
    assert done.wait(5), "the finalizer waited for the guard its own thread held"
    rival = lockcore.create("local", None, "collected-under-the-guard")
    assert rival.acquire(blocking=False)
    rival.release()
