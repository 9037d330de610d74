"""How a blocked acquire waits: fixed polls, jittered backoff, or a release notification."""

from __future__ import annotations

import random
import threading
import time

import pytest

import lockcore
from lockcore import waiting
from tests.support import FakeClock

pytestmark = pytest.mark.timeout(60)

#: every strategy whose release signals a notify-waiter (token's script does it itself)
REDIS_STRATEGIES = ["naive", "setnx", "setnx-expire", "getset", "token"]


@pytest.fixture
def long_blocks(monkeypatch):
    """Make a notify-waiter's fallback wake-up 5 s, so a quick wake-up proves a signal."""
    monkeypatch.setattr(waiting, "MAX_BLOCK_S", 5.0)


def held_lock(client, resource="res"):
    holder = lockcore.create("token", client, resource, ttl_ms=30_000)
    assert holder.acquire()
    return holder


def test_poll_sleeps_poll_ms_between_attempts_and_stops_at_the_deadline(redis_client,
                                                                         fake_clock):
    held_lock(redis_client)
    waiter = lockcore.create("token", redis_client, "res", wait="poll", poll_ms=30,
                             clock=fake_clock)
    assert waiter.acquire(timeout=0.1) is False
    assert fake_clock.sleeps == pytest.approx([0.03, 0.03, 0.03, 0.01])


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap(redis_client, fake_clock):
    random.seed(7)
    held_lock(redis_client)
    waiter = lockcore.create("token", redis_client, "res", wait="backoff", poll_ms=10,
                             max_poll_ms=80, clock=fake_clock)
    assert waiter.acquire(timeout=2.0) is False
    sleeps = fake_clock.sleeps
    ceilings = [min(0.08, 0.01 * 2 ** i) for i in range(len(sleeps))]
    assert all(s <= c + 1e-9 for s, c in zip(sleeps[:-1], ceilings, strict=False))
    assert len(set(sleeps)) > 1, "full jitter: the delays are not all equal"
    assert sum(sleeps) == pytest.approx(2.0)


def test_unknown_wait_mode_is_a_value_error(redis_client):
    with pytest.raises(ValueError, match="wait must be"):
        lockcore.create("token", redis_client, "res", wait="spin")


@pytest.mark.parametrize("strategy", REDIS_STRATEGIES)
def test_notify_waiter_wakes_on_release_not_on_its_fallback_timer(strategy, redis_client,
                                                                  long_blocks):
    holder = lockcore.create(strategy, redis_client, "res")
    waiter = lockcore.create(strategy, redis_client, "res", wait="notify")
    assert holder.acquire()
    got: list[float] = []
    thread = threading.Thread(
        target=lambda: got.append(time.monotonic() if waiter.acquire(timeout=10) else -1))
    thread.start()
    time.sleep(0.3)  # the waiter is blocked in BLPOP by now
    released_at = time.monotonic()
    holder.release()
    thread.join(timeout=10)
    assert got and got[0] > 0
    assert got[0] - released_at < 2.0, "woken by the signal, long before the 5 s fallback"
    waiter.release()


def test_release_between_a_failed_try_and_blpop_is_not_lost(redis_client, long_blocks):
    holder = held_lock(redis_client)
    waiter = lockcore.create("token", redis_client, "res", wait="notify")
    first_try = waiter._try_acquire

    def try_then_release(token):
        ok = first_try(token)
        if not ok and holder.token is not None:
            holder.release()  # lands after our failed try, before we block
        return ok

    waiter._try_acquire = try_then_release
    started = time.monotonic()
    assert waiter.acquire(timeout=10)
    assert time.monotonic() - started < 2.0, "the wake-up waited in the list for us"


def test_one_release_wakes_exactly_one_of_three_waiters(redis_client, long_blocks):
    holder = held_lock(redis_client)
    attempts: list[str] = []
    winners: list[lockcore.DistributedLock] = []
    finish = threading.Event()

    def wait_for_lock(index: int) -> None:
        lock = lockcore.create("token", redis_client, "res", wait="notify")
        took = lock._took  # every attempt's reply, whether made alone or after a BLPOP
        lock._took = lambda reply: attempts.append(str(index)) or took(reply)
        assert lock.acquire(timeout=30)
        winners.append(lock)
        finish.wait(30)
        lock.release()  # passes the lock on to the next waiter

    def blocked() -> int:
        return int(redis_client.info("clients")["blocked_clients"])

    others = blocked()  # the session's server is shared; count only our three
    threads = [threading.Thread(target=wait_for_lock, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while blocked() < others + 3:
        assert time.monotonic() < deadline, "the waiters never blocked"
        time.sleep(0.01)
    attempts.clear()
    holder.release()
    time.sleep(0.5)
    assert len(winners) == 1
    assert len(attempts) == 1, f"only one waiter should have woken: {attempts}"
    finish.set()
    for thread in threads:
        thread.join(timeout=30)
    assert len(winners) == 3


def test_notify_waiter_wakes_when_a_crashed_holders_ttl_runs_out(redis_client, long_blocks):
    crashed = lockcore.create("token", redis_client, "res", ttl_ms=300)
    assert crashed.acquire()  # and never released: its process "died"
    waiter = lockcore.create("token", redis_client, "res", wait="notify")
    started = time.monotonic()
    assert waiter.acquire(timeout=10)
    assert time.monotonic() - started < 0.3 + 1.0, "woke at the TTL, not the 5 s fallback"


@pytest.mark.parametrize("wait", ["poll", "backoff", "notify"])
def test_acquire_timeout_is_honoured_within_a_few_ms(wait, redis_client):
    held_lock(redis_client)
    waiter = lockcore.create("token", redis_client, "res", wait=wait)
    started = time.monotonic()
    assert waiter.acquire(timeout=0.2) is False
    elapsed = time.monotonic() - started
    # generous (two test processes share the machine); the spy test below is exact
    assert 0.2 <= elapsed < 0.2 + 0.5, elapsed


def test_notify_never_asks_redis_to_block_past_the_deadline(redis_client):
    # Redis times a BLPOP out on its hz timer, up to 100 ms late; the waiter must
    # leave that margin itself (this is what made timeout=0.2 take 0.29 s).
    held_lock(redis_client)
    waiter = lockcore.create("token", redis_client, "res", wait="notify")
    asked: list[tuple[float, float]] = []
    block_then_try = waiter._block_then_try  # the BLPOP, pipelined with the next attempt

    def spy(timeout):
        asked.append((timeout, deadline - time.monotonic()))
        return block_then_try(timeout)

    waiter._block_then_try = spy
    deadline = time.monotonic() + 0.35
    assert waiter.acquire(timeout=0.35) is False
    assert asked, "the waiter should have blocked in BLPOP at least once"
    for timeout, remaining in asked:
        assert timeout <= remaining - waiting.SERVER_TICK_S + 0.01


@pytest.mark.parametrize("strategy", ["token", "fair"])
def test_a_woken_waiter_holds_the_lock_before_its_releaser_can_barge_back(
        strategy, redis_client, long_blocks):
    # The waiter's attempt is pipelined behind its BLPOP, so Redis runs it as the
    # release's wake-up lands; the releaser's immediate retry comes a round trip later.
    # (With BLPOP and the attempt sent apart, the releaser usually won this race.)
    releaser = lockcore.create(strategy, redis_client, "res", wait="notify")
    assert releaser.acquire()
    for _ in range(5):
        waiter = lockcore.create(strategy, redis_client, "res", wait="notify")
        others = int(redis_client.info("clients")["blocked_clients"])
        thread = threading.Thread(target=waiter.acquire, kwargs={"timeout": 20})
        thread.start()
        deadline = time.monotonic() + 10
        while int(redis_client.info("clients")["blocked_clients"]) <= others:
            assert time.monotonic() < deadline, "the waiter never blocked"
            time.sleep(0.005)
        releaser.release()
        assert releaser.acquire(blocking=False) is False
        thread.join(timeout=20)
        assert waiter.held()
        waiter.release()
        assert releaser.acquire(blocking=False)
    releaser.release()


def test_an_attempt_pipelined_behind_a_timed_out_blpop_still_takes_a_free_lock(
        redis_client):
    waiter = lockcore.create("token", redis_client, "res", wait="notify")
    token, acquired = waiter._block_then_try(0.15)  # nobody signals: BLPOP times out
    assert acquired and redis_client.get(waiter.key) == token.encode()
    assert waiter.fencing_token is not None


def test_a_releaser_among_waiters_queues_before_it_tries_again(redis_client, long_blocks):
    def blocked_in_background(lock):
        others = int(redis_client.info("clients")["blocked_clients"])
        thread = threading.Thread(target=lock.acquire, kwargs={"timeout": 20})
        thread.start()
        deadline = time.monotonic() + 10
        while int(redis_client.info("clients")["blocked_clients"]) <= others:
            assert time.monotonic() < deadline, "the waiter never blocked"
            time.sleep(0.005)
        return thread

    releaser, first, second = (lockcore.create("token", redis_client, "res", wait="notify")
                               for _ in range(3))
    assert releaser.acquire()
    waiting = blocked_in_background(first)
    releaser.release()  # first takes this wake-up and the lock
    waiting.join(timeout=20)
    waiting = blocked_in_background(releaser)
    first.release()  # the releaser takes *first's* wake-up
    waiting.join(timeout=20)
    assert releaser.held()
    waiting = blocked_in_background(second)
    releaser.release()
    waiting.join(timeout=20)
    assert second.held()
    # Its previous wake-up was taken by someone else: others are queued, so its next
    # acquire blocks first (BLPOP + try in one round trip) instead of a try that fails.
    assert releaser.queue_first
    second.release()
    assert releaser.acquire(timeout=5)
    releaser.release()


def test_a_lone_handle_keeps_to_one_round_trip_per_acquire(redis_client):
    lock = lockcore.create("token", redis_client, "res", wait="notify")
    pipelined: list[float] = []
    block_then_try = lock._block_then_try
    lock._block_then_try = lambda block: pipelined.append(block) or block_then_try(block)
    for _ in range(6):
        assert lock.acquire(timeout=5)
        lock.release()
    # At most the first release (no earlier wake-up to compare with) sends it queueing;
    # it then pops its own wake-up and knows that nobody else is waiting.
    assert len(pipelined) <= 1
    assert not lock.queue_first


def test_timeout_zero_still_makes_one_attempt_after_a_release_that_said_queue(redis_client):
    lock = lockcore.create("token", redis_client, "res", wait="notify")
    lock.queue_first = True  # as a release among waiters leaves it
    assert lock.acquire(timeout=0)  # the lock is free: one attempt must find that
    lock.release()


def test_a_queue_first_hint_older_than_the_newest_wake_up_could_be_is_dropped(
        redis_client, fake_clock):
    from lockcore.strategies.token import QUEUE_FIRST_S

    lock = lockcore.create("token", redis_client, "res", wait="notify", clock=fake_clock)
    assert lock.acquire()
    lock.release()
    lock.queue_first = True  # as if that release had found others waiting ...
    fake_clock.now += QUEUE_FIRST_S + 1  # ... long ago: the wake-ups may have expired
    lock._block_then_try = lambda block: pytest.fail("queued behind a wake-up that may be gone")
    assert lock.acquire(timeout=5)
    lock.release()


@pytest.mark.parametrize("socket_timeout", [0.3, 0.15])
@pytest.mark.parametrize("strategy", ["token", "fair", "multi"])
def test_a_notify_waiter_on_a_client_with_a_short_socket_timeout_waits_it_out(
        redis_url, strategy, socket_timeout):
    # a BLPOP longer than the client's socket timeout raised redis.TimeoutError on a
    # healthy Redis: each block must end (Redis answering) before the client stops reading
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=socket_timeout)
    resource = ["res"] if strategy == "multi" else "res"
    holder = lockcore.create(strategy, client, resource, wait="notify", ttl_ms=30_000)
    assert holder.acquire(blocking=False)
    releaser = threading.Timer(1.2, holder.release)
    releaser.start()
    waiter = lockcore.create(strategy, client, resource, wait="notify", ttl_ms=30_000)
    started = time.monotonic()
    try:
        assert waiter.acquire(timeout=5)
        assert 1.1 < time.monotonic() - started < 4
        waiter.release()
    finally:
        releaser.join(10)  # its reply may still be on its way: close only after it
        client.close()


def test_the_longest_block_fits_the_clients_socket_timeout():
    import redis

    assert waiting.longest_block_s(redis.Redis()) == waiting.MAX_BLOCK_S
    assert waiting.longest_block_s(redis.Redis(socket_timeout=5)) == waiting.MAX_BLOCK_S
    assert waiting.longest_block_s(redis.Redis(socket_timeout=0.5)) == pytest.approx(0.4)
    # too short for a BLPOP: fine polls, never a wait of 0 (a busy loop)
    assert waiting.longest_block_s(redis.Redis(socket_timeout=0.05)) == waiting.FINE_POLL_S


@pytest.mark.parametrize("strategy", ["token", "fair", "multi"])
def test_notify_waiters_leave_a_small_pool_a_connection_for_the_holders_release(
        redis_server, strategy):
    """Four waiters blocked in BLPOP on a pool of four connections left none for the
    holder: its release raised ``MaxConnectionsError``, the lock stayed held for its TTL
    and every waiter timed out (a lockcore audit)."""
    import redis

    pool = redis.ConnectionPool.from_url(redis_server.url, max_connections=4)
    client = redis.Redis(connection_pool=pool)
    resource = f"small-pool-{strategy}"
    try:
        holder = lockcore.create(strategy, client, resource, ttl_ms=10_000, wait="notify")
        assert holder.acquire(blocking=False)
        got: list[float] = []
        errors: list[BaseException] = []

        def wait() -> None:
            lock = lockcore.create(strategy, client, resource, ttl_ms=10_000, wait="notify")
            try:
                if lock.acquire(timeout=4.0):
                    got.append(time.monotonic())
                    lock.release()
            except BaseException as exc:  # noqa: BLE001 - judged below
                errors.append(exc)

        waiters = [threading.Thread(target=wait) for _ in range(4)]
        for waiter in waiters:
            waiter.start()
        time.sleep(0.5)  # all four are waiting
        released = time.monotonic()
        holder.release()
        for waiter in waiters:
            waiter.join(10)
        assert not errors, errors
        assert len(got) == 4 and max(got) - released < 2.0, (got, released)
    finally:
        client.close()
        pool.disconnect()


@pytest.mark.parametrize("strategy, wait", [
    ("token", "notify"), ("fair", "notify"), ("multi", "notify"),
    ("token", "poll"), ("setnx", "poll"),
])
def test_more_threads_than_a_plain_pools_connections_wait_for_one_and_count_exactly(
        redis_server, strategy, wait):
    """Sixteen threads on one client whose pool holds four connections: their tries used
    the connections up, so acquires raised ``MaxConnectionsError`` instead of waiting,
    and a holder's release now and then raised too, leaving the lock held for its TTL
    (``setnx``: for good) (a lockcore audit). A full pool is a try that did not take
    the lock, and a release waits for a connection."""
    import redis

    pool = redis.ConnectionPool.from_url(redis_server.url, max_connections=4)
    client = redis.Redis(connection_pool=pool)
    counter = redis.Redis.from_url(redis_server.url)  # the guarded work, on its own pool
    resource = f"crowded-pool-{strategy}-{wait}"
    key = f"{resource}:count"
    counter.delete(key)
    errors: list[BaseException] = []
    timeouts: list[int] = []

    def work() -> None:
        lock = lockcore.create(strategy, client, resource, ttl_ms=10_000, wait=wait)
        for _ in range(25):
            try:
                if not lock.acquire(timeout=10.0):
                    timeouts.append(1)
                    continue
                try:
                    value = int(counter.get(key) or 0)  # read, then write: the lock's job
                    counter.set(key, value + 1)
                finally:
                    lock.release()
            except BaseException as exc:  # noqa: BLE001 - judged below
                errors.append(exc)

    try:
        threads = [threading.Thread(target=work) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors[:3]
        assert not timeouts
        assert int(counter.get(key) or 0) == 16 * 25
    finally:
        counter.delete(key)
        counter.close()
        client.close()
        pool.disconnect()


@pytest.mark.parametrize("strategy", ["token", "fair", "multi", "naive"])
def test_a_pool_full_for_the_whole_timeout_gives_up_at_the_timeout(redis_server, strategy):
    """Every try met a full pool, so nothing was ever sent: ``fair`` still left its queue
    patiently, waiting up to 5 s for a connection, and ``acquire(timeout=0.5)`` said
    False after 2.8 s, on a free lock (a lockcore audit)."""
    import redis

    pool = redis.ConnectionPool.from_url(redis_server.url, max_connections=1)
    client = redis.Redis(connection_pool=pool)
    busy = threading.Thread(target=client.blpop, args=([f"never-{strategy}"], 3))
    try:
        busy.start()  # the pool's one connection, for 3 s
        time.sleep(0.3)
        lock = lockcore.create(strategy, client, f"full-pool-{strategy}")
        started = time.monotonic()
        assert lock.acquire(timeout=0.5) is False
        assert time.monotonic() - started < 1.5
        busy.join(10)
        assert lock.acquire(blocking=False)  # the connection is back: nothing left queued
        lock.release()
    finally:
        busy.join(10)
        client.close()
        pool.disconnect()


@pytest.mark.parametrize("strategy", ["setnx-expire", "getset", "token", "fair"])
def test_notify_waiters_on_a_single_connection_client_poll_instead_of_blocking_it(
        redis_server, strategy):
    """A ``single_connection_client`` has one connection for every thread: a waiter's
    BLPOP held it for up to a second, and the holder's release queued behind each one
    (a lockcore audit: ``setnx-expire`` 16 of 40 acquisitions in 56 s, 24 timeouts; a
    plain client, all 40 in 0.1 s). Such a client gets no blocking slot: its waiters
    poll."""
    import redis

    client = redis.Redis.from_url(redis_server.url, single_connection_client=True)
    resource = f"single-connection-{strategy}"
    got, errors = [], []

    def contend() -> None:
        lock = lockcore.create(strategy, client, resource, ttl_ms=10_000, wait="notify")
        try:
            for _ in range(5):
                if lock.acquire(timeout=10):
                    got.append(1)
                    lock.release()
        except BaseException as exc:  # noqa: BLE001 - judged below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=contend) for _ in range(8)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        assert len(got) == 40, (len(got), time.monotonic() - started)  # none timed out
    finally:
        client.close()


#: every strategy whose notify-waiter blocks in BLPOP, with options that send it there
NOTIFY_BLPOP = [("naive", {}), ("setnx", {}), ("setnx-expire", {}), ("getset", {}),
                ("token", {}), ("token", {"handoff_after_ms": 0}), ("fair", {}),
                ("multi", {})]


class SentBlpops:
    """The timeout of every BLPOP this process sends, as sent; a block moves ``clock``
    on by what it asked for, and at least the millisecond a Redis >= 7.0.8 waits (a
    fake clock stands still in Redis calls)."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []
        self.clock = None

    def note(self, command) -> None:
        if str(command[0]).upper() == "BLPOP":
            self.timeouts.append(float(command[-1]))
            if self.clock is not None:
                self.clock.now += max(float(command[-1]), 0.001)


class ClockOfMicroseconds(FakeClock):
    """A fake clock on which a sleep lasts a microsecond at least, as a real one: a
    waiter on main slept 1e-14 s again and again, and no time passed."""

    def sleep(self, seconds: float) -> None:
        super().sleep(max(seconds, 1e-6))


@pytest.fixture
def sent_blpops(monkeypatch) -> SentBlpops:
    """Spies on the serializers that pack every command: redis-py's commands and
    pipelines, and lockcore's lanes (``wire.py``)."""
    from redis.connection import HiredisRespSerializer, PythonRespSerializer

    sent = SentBlpops()
    for serializer in (HiredisRespSerializer, PythonRespSerializer):
        def pack(self, *args, _pack=serializer.pack):
            sent.note(args)
            return _pack(self, *args)

        monkeypatch.setattr(serializer, "pack", pack)
    return sent


@pytest.mark.parametrize("strategy, options", NOTIFY_BLPOP,
                         ids=[f"{s}{o}" for s, o in NOTIFY_BLPOP])
def test_no_blpop_timeout_is_under_two_ms_nor_a_part_of_one_whatever_the_time_left(
        redis_client, sent_blpops, strategy, options):
    """Redis before 7.0.8 counts a BLPOP timeout in whole ms, truncated, and 0 means
    "for ever" (redis/redis#11687): ``0.001`` itself is 0 there (its long double is
    0.999... ms). A waiter with 0.1005 s left sent ``BLPOP key 0.0005`` and slept
    through its deadline (``tests/lockcore/test_old_redis.py`` shows it on such a
    Redis). Every time left between 0.1001 and 0.1030 s, on a fake clock: exact."""
    resource = ["res"] if strategy == "multi" else "res"
    holder = lockcore.create(strategy, redis_client, resource, ttl_ms=300_000)
    assert holder.acquire(blocking=False)
    sent_blpops.clock = fake_clock = ClockOfMicroseconds()
    timeouts = [0.1 + tenths / 10_000 for tenths in range(1, 31)] + [0.25]
    for timeout in timeouts:  # the last one blocks whatever the strategy
        waiter = lockcore.create(strategy, redis_client, resource, ttl_ms=30_000,
                                 wait="notify", clock=fake_clock, **options)
        assert waiter.acquire(timeout=timeout) is False
    assert sent_blpops.timeouts, "the waiters should have blocked in BLPOP"
    assert min(sent_blpops.timeouts) >= 0.002, sorted(sent_blpops.timeouts)[:5]
    # whole milliseconds, as Redis counts them: what is sent is what it waits
    assert all(abs(t * 1000 - round(t * 1000)) < 1e-6 for t in sent_blpops.timeouts), \
        sent_blpops.timeouts
    holder.release()


@pytest.mark.parametrize("strategy, options", [("token", {"handoff_after_ms": 0}),
                                               ("fair", {}), ("multi", {})])
def test_a_block_asked_for_a_fraction_of_a_ms_sends_a_safe_blpop_timeout(
        redis_client, sent_blpops, strategy, options):
    # whoever calls it: each BLPOP site rounds the timeout itself
    resource = ["res"] if strategy == "multi" else "res"
    holder = lockcore.create(strategy, redis_client, resource, ttl_ms=30_000)
    assert holder.acquire(blocking=False)
    waiter = lockcore.create(strategy, redis_client, resource, ttl_ms=30_000,
                             wait="notify", **options)
    assert waiter.acquire(blocking=False) is False
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(waiter._block_then_try(0.0004)),
                              daemon=True)
    thread.start()
    thread.join(5)  # a hang detector: on Redis >= 7.0.8 0.0004 is 1 ms, not for ever
    assert not thread.is_alive() and result and result[0][1] is False
    assert sent_blpops.timeouts == [0.002]
    getattr(waiter, "_leave_queue", lambda: None)()
    holder.release()
