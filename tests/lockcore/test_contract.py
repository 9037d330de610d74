"""The contract every strategy keeps, run against each registry entry on real servers.

A strategy whose module is not written yet is skipped (see ``strategy_params``); once
it exists, it runs here like every other. Unsafe strategies keep this contract too in
a single thread: their failures need concurrency, crashes or skewed clocks, and are
shown in their own test modules.
"""

from __future__ import annotations

import time
import uuid

import pytest

import lockcore
from lockcore import LockNotOwned, LockTimeout
from tests.lockcore.strategy_params import ALL, lock_class_or_skip

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=ALL)
def strategy(request):
    lock_class_or_skip(request.param)
    return request.param


@pytest.fixture
def pair(strategy, make_lock):
    """Two handles on one fresh resource (fresh, so a failed test leaves nothing behind)."""
    resource = f"contract-{uuid.uuid4().hex[:8]}"
    first, second = make_lock(strategy, resource), make_lock(strategy, resource)
    yield first, second
    for lock in (first, second):
        if lock.token is not None:
            lock.release()


def test_acquire_then_release(pair):
    lock, _ = pair
    assert lock.acquire(blocking=False)
    assert lock.held()
    assert lock.locked()
    lock.release()
    assert not lock.held()
    assert not lock.locked()


def test_non_blocking_acquire_of_a_held_lock_returns_false(pair):
    holder, rival = pair
    assert holder.acquire(blocking=False)
    assert rival.acquire(blocking=False) is False
    assert rival.token is None


def test_acquire_with_timeout_gives_up_after_about_that_long(pair):
    holder, rival = pair
    assert holder.acquire()
    started = time.monotonic()
    assert rival.acquire(timeout=0.2) is False
    elapsed = time.monotonic() - started
    assert 0.2 <= elapsed < 0.2 + 0.5, elapsed  # generous: the machine is shared


def test_lock_is_free_again_after_release(pair):
    holder, rival = pair
    assert holder.acquire()
    holder.release()
    assert rival.acquire(blocking=False)


def test_releasing_a_lock_never_acquired_raises_not_owned(pair):
    holder, rival = pair
    assert holder.acquire()
    with pytest.raises(LockNotOwned):
        rival.release()
    assert holder.held()  # the failed release did not free the holder's lock


def test_releasing_twice_raises_not_owned(pair):
    lock, _ = pair
    assert lock.acquire()
    lock.release()
    with pytest.raises(LockNotOwned):
        lock.release()


def test_a_handle_is_not_reentrant(pair):
    lock, _ = pair
    assert lock.acquire()
    with pytest.raises(lockcore.LockError):
        lock.acquire(blocking=False)


def test_context_manager_holds_inside_and_frees_after(pair):
    lock, rival = pair
    with lock as held:
        assert held is lock
        assert lock.held()
        assert rival.acquire(blocking=False) is False
    assert lock.token is None
    assert rival.acquire(blocking=False)


def test_context_manager_raises_lock_timeout_when_it_cannot_acquire(strategy, make_lock):
    resource = f"contract-{uuid.uuid4().hex[:8]}"
    holder = make_lock(strategy, resource)
    rival = make_lock(strategy, resource, timeout=0.1)
    assert holder.acquire()
    try:
        with pytest.raises(LockTimeout):
            with rival:
                pytest.fail("entered a lock someone else holds")
    finally:
        holder.release()


def test_strategy_declares_safety_origin_and_summary(strategy):
    cls = lockcore.registry.lock_class(strategy)
    assert cls.strategy == strategy
    assert isinstance(cls.safe, bool)
    assert cls.origin.startswith("seed")
    assert cls.summary


def test_strategies_lists_every_registry_name_with_its_origin():
    for name in ALL:
        lock_class_or_skip(name)
    infos = lockcore.strategies()
    assert [info.name for info in infos] == ALL
    assert all(info.origin.startswith("seed") and info.summary for info in infos)
    assert {info.name for info in infos if not info.safe} >= {
        "local", "naive", "setnx", "setnx-expire", "getset"}


def test_unknown_strategy_is_a_value_error():
    with pytest.raises(ValueError, match="unknown lock strategy"):
        lockcore.create("no-such-lock", None, "res")
