"""The contract every strategy keeps, run against each registry entry on real servers.

A strategy whose module is not written yet is skipped (see ``strategy_params``); once
it exists, it runs here like every other. Unsafe strategies keep this contract too in
a single thread: their failures need concurrency, crashes or skewed clocks, and are
shown in their own test modules.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from typing import Any

import pytest
import redis

import lockcore
from lockcore import LockNotOwned, LockTimeout
from tests.lockcore.strategy_params import ALL, lock_class

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=ALL)
def strategy(request):
    lock_class(request.param)
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


def test_a_failed_acquire_shows_no_fencing_token_not_the_last_holds(pair):
    # after a failed acquire the handle still showed the token of its previous hold,
    # one that another holder's had since passed (a lockcore audit)
    first, second = pair
    assert first.acquire(blocking=False)
    first.release()
    assert second.acquire(blocking=False)
    assert first.acquire(blocking=False) is False
    assert first.fencing_token is None


def test_acquire_with_timeout_gives_up_after_about_that_long(pair):
    holder, rival = pair
    assert holder.acquire()
    started = time.monotonic()
    assert rival.acquire(timeout=0.2) is False
    elapsed = time.monotonic() - started
    assert 0.2 <= elapsed < 0.2 + 0.5, elapsed  # generous: the machine is shared


def test_a_timed_out_acquire_is_not_logged_as_a_warning(pair, caplog):
    # contention is not an error: a busy shop printed a WARNING per buyer it timed out
    holder, rival = pair
    assert holder.acquire()
    with caplog.at_level(logging.DEBUG, logger="lockcore"):
        assert rival.acquire(timeout=0.05) is False
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


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


def test_a_second_thread_acquiring_with_the_same_handle_waits_its_turn(pair):
    """A handle is one holder: a concurrent acquire on it from another thread must not
    overwrite the first's token (or its place in a queue). It waits for the handle
    within its timeout, as on a ``threading.Lock`` (it used to raise ``LockError``)."""
    import threading

    lock, rival = pair
    assert rival.acquire()
    outcome: list[bool] = []
    first = threading.Thread(target=lambda: outcome.append(lock.acquire(timeout=10)))
    first.start()
    try:
        deadline = time.monotonic() + 5
        while lock._occupant is None and time.monotonic() < deadline:  # it is waiting
            time.sleep(0.005)
        assert lock.acquire(blocking=False) is False
        started = time.monotonic()
        assert lock.acquire(timeout=0.2) is False
        assert time.monotonic() - started >= 0.2
    finally:
        rival.release()
        first.join(15)
    assert outcome == [True]
    lock.release()  # the first thread's acquisition is intact
    assert rival.acquire(blocking=False)
    rival.release()


def test_threads_sharing_one_handle_take_turns(pair):
    """``with lock:`` in several threads on one handle, as with a ``threading.Lock``:
    every section runs, one at a time, and each holds the lock in the backend."""
    import threading

    lock, rival = pair
    inside, most, sections, errors = [0], [0], [0], []
    guard = threading.Lock()

    def buyer() -> None:
        try:
            for _ in range(5):
                with lock:
                    with guard:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                    assert rival.acquire(blocking=False) is False
                    time.sleep(0.002)
                    with guard:
                        inside[0] -= 1
                        sections[0] += 1
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=buyer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(40)
    assert errors == []
    assert (sections[0], most[0]) == (20, 1)
    assert lock.token is None and rival.acquire(blocking=False)
    rival.release()


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


def test_leaving_with_after_the_body_released_says_so_not_that_the_lock_was_lost(pair):
    """It raised ``LockLost("lock lost while held: it expired or was taken")``, for
    ``local`` and ``setnx`` too, which never expire (a lockcore audit)."""
    lock, rival = pair
    with pytest.raises(LockNotOwned, match="released before leaving") as caught:
        with lock:
            lock.release()
    assert not isinstance(caught.value, lockcore.LockLost)
    assert rival.acquire(blocking=False)


def test_strategy_declares_safety_origin_and_summary(strategy):
    cls = lockcore.registry.lock_class(strategy)
    assert cls.strategy == strategy
    assert isinstance(cls.safe, bool)
    assert cls.origin.startswith("seed")
    assert cls.summary


def test_strategies_lists_every_registry_name_with_its_origin():
    for name in ALL:
        lock_class(name)
    infos = lockcore.strategies()
    assert [info.name for info in infos] == ALL
    assert all(info.origin.startswith("seed") and info.summary for info in infos)
    assert {info.name for info in infos if not info.safe} >= {
        "local", "naive", "setnx", "setnx-expire", "getset"}


def test_unknown_strategy_is_a_value_error():
    with pytest.raises(ValueError, match="unknown lock strategy"):
        lockcore.create("no-such-lock", None, "res")


@pytest.mark.parametrize("strategy", [["token"], None, 3])
def test_a_strategy_that_is_no_string_is_a_type_error_naming_the_choices(strategy):
    # a list was "unhashable type: 'list'", naming nothing (a lockcore audit)
    with pytest.raises(TypeError, match="named by a string .*token"):
        lockcore.create(strategy, None, "res")


BAD_OPTIONS = {
    "poll_ms-nan": {"poll_ms": float("nan")},
    "poll_ms-str": {"poll_ms": "5"},
    "max_poll_ms-inf": {"max_poll_ms": float("inf")},
    "ttl_ms-past-redis": {"ttl_ms": 2**63},
    "timeout-negative": {"timeout": -2},  # -1 is no limit, as in acquire
    "timeout-nan": {"timeout": float("nan")},
    "timeout-str": {"timeout": "x"},
    # 1e300 passed create, then overflowed a sleep or reached Redis
    "poll_ms-huge": {"poll_ms": 1e300},
    "max_poll_ms-huge": {"max_poll_ms": 1e300},
}


@pytest.mark.parametrize("options", [pytest.param(v, id=k) for k, v in BAD_OPTIONS.items()])
@pytest.mark.parametrize("strategy", [s for s in ALL if s != "zookeeper"])
def test_a_bad_option_is_a_value_error_at_create(make_lock, strategy, options):
    """Not at the first acquire (a Redis ResponseError, a NaN that waits forever, a key
    left behind without a TTL), and not a TypeError from inside the library."""
    lock_class(strategy)
    with pytest.raises(ValueError, match=next(iter(options))):
        make_lock(strategy, **options)


# options of one strategy, accepted at create before and failing later (a Lua error, a
# NoneType error, a lock never acquirable) or with a message naming no option
STRATEGY_BAD_OPTIONS = [
    ("fair", {"lease_ms": -5}, ValueError, "lease_ms"),
    ("fair", {"lease_ms": 0}, ValueError, "lease_ms"),
    ("fair", {"lease_ms": float("nan")}, ValueError, "lease_ms"),
    ("fair", {"lease_ms": "x"}, ValueError, "lease_ms"),
    ("fair", {"lease_ms": 10**30}, ValueError, "lease_ms"),
    ("token", {"lease_ms": 5_000}, TypeError, "lease_ms"),
    ("token", {"handoff_after_ms": float("nan")}, ValueError, "handoff_after_ms"),
    ("token", {"handoff_after_ms": float("inf")}, ValueError, "handoff_after_ms"),
    ("redlock", {"node_timeout_ms": 0}, ValueError, "node_timeout_ms"),
    ("redlock", {"node_timeout_ms": -1}, ValueError, "node_timeout_ms"),
    ("redlock", {"node_timeout_ms": float("nan")}, ValueError, "node_timeout_ms"),
    ("redlock", {"node_timeout_ms": 1e300}, ValueError, "node_timeout_ms"),
    ("redlock", {"node_timeout_ms": "x"}, ValueError, "node_timeout_ms"),
    ("redlock", {"ttl_ms": 2}, ValueError, "drift"),
    ("multi", {"hash_tag": 5}, TypeError, "hash_tag"),
    ("token", {"watchdog": "false"}, TypeError, "watchdog"),  # "false" switched it on
    ("fair", {"watchdog": 1}, TypeError, "watchdog"),
]


@pytest.mark.parametrize("strategy, options, error, named", STRATEGY_BAD_OPTIONS,
                         ids=[f"{s}-{next(iter(o))}={next(iter(o.values()))!r}"
                              for s, o, _, _ in STRATEGY_BAD_OPTIONS])
def test_a_strategys_bad_option_is_refused_at_create_naming_it(make_lock, strategy, options,
                                                              error, named):
    lock_class(strategy)
    with pytest.raises(error, match=named):
        make_lock(strategy, **options)


def test_an_unknown_option_names_the_strategy_and_its_options(redis_client):
    # it said "DistributedLock.__init__() got an unexpected keyword argument 'ttl'",
    # naming neither the strategy nor what it takes (a lockcore audit)
    with pytest.raises(TypeError) as raised:
        lockcore.create("token", redis_client, "typo", ttl=5_000)
    said = str(raised.value)
    assert said.startswith("'token' lock: unknown option 'ttl'"), said
    assert "ttl_ms" in said and "handoff_after_ms" in said and "__init__" not in said


def _default_of(cls: type, option: str) -> Any:
    """``option``'s default in the first constructor along ``cls``'s MRO that has one
    (None if none has: a keyword the base requires and the subclass passes itself)."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        parameter = None if init is None else inspect.signature(init).parameters.get(option)
        if parameter is not None and parameter.default is not parameter.empty:
            return parameter.default
    return None


def test_every_option_an_unknown_option_lists_is_taken(strategy, make_lock):
    """The options an unknown one lists are those the strategy takes: ``token`` listed
    ``lease_ms`` (its base class's), and refused it (a lockcore audit)."""
    with pytest.raises(TypeError) as raised:
        make_lock(strategy, bogus=1)
    listed = str(raised.value).partition("its options: ")[2].split(", ")
    assert "ttl_ms" in listed, raised.value
    cls = lock_class(strategy)
    for option in listed:
        make_lock(strategy, **{option: _default_of(cls, option)})


def test_a_tiny_redlock_ttl_above_the_drift_allowance_is_accepted(make_lock):
    assert make_lock("redlock", ttl_ms=3).ttl_ms == 3


def test_a_fractional_lease_is_rounded_up_as_a_ttl_is(make_lock):
    lock_class("fair")
    assert make_lock("fair", lease_ms=2.5 * 1000).lease_ms == 2500
    assert make_lock("fair", lease_ms=1500.2).lease_ms == 1501


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -0.5])
def test_acquire_refuses_a_timeout_that_is_not_a_finite_number(pair, timeout):
    lock, _ = pair
    with pytest.raises(ValueError, match="timeout"):
        lock.acquire(timeout=timeout)
    assert lock.token is None


@pytest.mark.parametrize("backend", [None, "redis://127.0.0.1:6379"])
@pytest.mark.parametrize("strategy", ["naive", "setnx", "setnx-expire", "getset", "token",
                                      "fair", "multi"])
def test_a_redis_strategy_on_something_else_is_a_type_error(strategy, backend):
    with pytest.raises(TypeError, match="redis-py client"):
        lockcore.create(strategy, backend, ["a", "b"] if strategy == "multi" else "res")


def _not_a_sync_client(kind: str, redis_client: Any) -> Any:
    import redis.asyncio

    return {"the class": redis.Redis, "a pipeline": redis_client.pipeline(),
            "an asyncio client": redis.asyncio.Redis()}[kind]


@pytest.mark.parametrize("kind", ["the class", "a pipeline", "an asyncio client"])
@pytest.mark.parametrize("strategy", ["naive", "setnx", "setnx-expire", "getset", "token",
                                      "fair", "multi", "redlock"])
def test_what_only_looks_like_a_redis_client_is_a_type_error_at_create(strategy, kind,
                                                                       redis_client):
    # an audit: a pipeline's or a coroutine's truthy "reply" let every setnx handle hold
    # the lock at once, with no key in Redis; the others failed later, obscurely
    backend = _not_a_sync_client(kind, redis_client)
    with pytest.raises(TypeError, match="redis-py client"):
        lockcore.create(strategy, [backend] * 3 if strategy == "redlock" else backend,
                        ["a", "b"] if strategy == "multi" else "res")


@pytest.mark.parametrize("option, value, match", [
    ("on_lost", "page-me", "on_lost must be a callable"),   # was: TypeError once lost
    ("clock", "x", "clock needs monotonic"),                # was: at the first acquire
])
@pytest.mark.parametrize("strategy", ["naive", "setnx-expire", "getset", "token", "fair",
                                      "redlock", "local"])
def test_an_option_that_would_fail_later_is_refused_at_create(strategy, option, value, match,
                                                              redis_client):
    # redlock: three distinct servers, never dialled
    backend = [redis.Redis(port=p) for p in (1, 2, 3)] if strategy == "redlock" else redis_client
    with pytest.raises(TypeError, match=match):
        lockcore.create(strategy, backend, "res", **{option: value})


@pytest.mark.parametrize("strategy, option, value", [
    ("setnx-expire", "gap_s", float("nan")),  # sleep(nan) raised after SETNX: left set
    ("setnx-expire", "gap_s", "1"),
    ("getset", "clock_skew_s", float("nan")),  # every expiry comparison was False
    ("getset", "clock_skew_s", "ahead"),
])
def test_a_lab_knob_that_is_not_a_finite_number_is_refused(strategy, option, value,
                                                           redis_client):
    with pytest.raises(ValueError, match=option):
        lockcore.create(strategy, redis_client, "res", **{option: value})


def test_getset_refuses_a_hook_that_is_not_callable(redis_client):
    with pytest.raises(TypeError, match="between_get_and_getset must be callable"):
        lockcore.create("getset", redis_client, "res", between_get_and_getset="x")


@pytest.mark.parametrize("backend", [None, "redis://127.0.0.1:1", object()])
def test_the_local_lock_ignores_its_backend_on_release_too(backend):
    # release raised AttributeError (it signalled waiters through the "client") after
    # it had released
    lock = lockcore.create("local", backend, "local-backend")
    assert lock.acquire(blocking=False)
    lock.release()
    assert not lock.locked()


def test_the_local_lock_writes_nothing_to_a_redis_client(redis_client):
    with lockcore.create("local", redis_client, "local-quiet"):
        pass
    assert redis_client.keys("*") == []


@pytest.mark.parametrize("ttl_ms", [10**13, 2**63, 0, -1])
def test_extend_refuses_a_ttl_create_would_refuse(pair, ttl_ms):
    """Was: a PTTL of centuries, or redis-py's raw ResponseError past Redis's range."""
    lock, _ = pair
    if not lock.expires:
        pytest.skip(f"{lock.strategy} locks do not expire")
    assert lock.acquire(blocking=False)
    with pytest.raises(ValueError, match="ttl_ms"):
        lock.extend(ttl_ms)
    assert lock.held()  # still ours, untouched
    lock.release()


def test_acquire_takes_the_conventions_users_bring(pair):
    """``timeout=-1`` is no limit (``threading.Lock``), ``blocking=None`` the default
    (redis-py's ``Lock``): both raised ValueError."""
    lock, other = pair
    assert lock.acquire(timeout=-1)
    assert other.acquire(blocking=None, timeout=0.05) is False
    lock.release()
    assert other.acquire(blocking=None, timeout=-1)
    other.release()


def test_create_takes_timeout_minus_one_as_acquire_does(make_lock):
    # refused by create ("timeout must be None ... not -1") while acquire took it for no
    # limit: a `with` lock was the one place -1 did not work (a lockcore audit)
    lock = make_lock("token", "minus-one", timeout=-1)
    assert lock.default_timeout is None
    with lock:
        assert lock.held()


@pytest.mark.parametrize("strategy", ["token", "fair", "getset", "redlock", "multi"])
def test_a_name_that_is_not_valid_unicode_is_refused_at_create(make_lock, strategy):
    # a lone surrogate (a bad decode's "\udcff") was taken, and failed at acquire with
    # UnicodeEncodeError (redlock: False, every node's "no")
    with pytest.raises(ValueError, match="not valid Unicode"):
        make_lock(strategy, "stock:\udcff")


def test_a_forked_child_has_its_own_copy_of_a_local_lock():
    """``local`` lives in the process: a child forked inside ``with`` holds its own copy,
    and leaving the ``with`` there must release that copy, or the child could never take
    it again (a review of the fork refusal below)."""
    import os

    lock = lockcore.create("local", None, "forked-local")
    with lock:
        child = os.fork()
        if child == 0:
            lock.__exit__(None, None, None)
            again = lockcore.create("local", None, "forked-local").acquire(timeout=1)
            os._exit(0 if again else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert lock.held()


@pytest.mark.parametrize("strategy", [s for s in ALL if s not in ("local", "zookeeper")])
def test_a_forked_child_leaving_the_parents_with_leaves_the_parents_lock(make_lock, strategy):
    """A fork inside ``with lock:`` copies the handle, token and all. The child unwinding
    the ``with`` (a worker's ``sys.exit``, say) released the parent's lock mid-section,
    and a rival took it (a lockcore audit). The child's exit now leaves it alone, and a
    child's explicit ``release()`` is refused (``LockNotOwned``) without a word to the
    backend."""
    import os

    lock_class(strategy)
    lock, rival = make_lock(strategy, "forked"), make_lock(strategy, "forked")
    with lock:
        child = os.fork()
        if child == 0:  # the child: exit codes say what it saw
            code = 0
            try:
                try:
                    lock.release()
                    code = 2  # released the parent's lock
                except lockcore.LockNotOwned:
                    pass
                lock.__exit__(None, None, None)  # the child's ``with`` unwinding
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0, os.waitstatus_to_exitcode(status)
        assert rival.acquire(blocking=False) is False, "the child released the parent's lock"
        assert lock.held()


@pytest.mark.parametrize("strategy", [s for s in ALL if s not in ("local", "zookeeper")])
def test_a_name_that_would_empty_the_hash_tag_is_refused_at_create(make_lock, strategy):
    """``lock:{name}`` shares its tag with ``lock:{name}:fence`` and the rest, so one
    script's keys sit in one cluster slot. A name starting with ``}`` ended the tag at
    once (``lock:{}x}``): each key hashed whole, four slots, a CROSSSLOT error on a
    cluster (a lockcore audit). A ``}`` later in the name still leaves a shared tag."""
    from redis.crc import key_slot

    lock_class(strategy)
    if strategy == "multi":  # its keys' tag is its hash_tag option, not the names
        make_lock(strategy, ["}x"])
        make_lock(strategy, ["a", "}x"])
    else:
        with pytest.raises(ValueError, match="may not start with '}'"):
            make_lock(strategy, "}x")
    lock = make_lock(strategy, "a}b")
    slots = {key_slot(key.encode()) for key in (lock.key, f"{lock.key}:fence")}
    assert len(slots) == 1


def test_acquire_and_create_refuse_a_timeout_past_a_year(pair, strategy, make_lock):
    # 1e10 s overflowed a threading wait (local's notify-waiter, a shared handle)
    lock, _ = pair
    with pytest.raises(ValueError, match="a year"):
        lock.acquire(timeout=1e10)
    assert lock.token is None
    with pytest.raises(ValueError, match="a year"):
        make_lock(strategy, timeout=365 * 24 * 3600 + 1)
