"""zookeeper: kazoo's recipe behind our interface, on a ZooKeeper the session started."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import lockcore
from lockcore import LockLost, LockNotOwned, LockTimeout

pytestmark = pytest.mark.zookeeper
kazoo_client = pytest.importorskip("kazoo.client")


#: for the tests that restart ZooKeeper: kazoo's default gave up reconnecting ("Failed
#: connecting to Zookeeper within the connection retry policy") while a busy machine's
#: JVM was still starting, and the test failed waiting for its clients
RECONNECT_FOR_EVER = {"max_tries": -1, "max_delay": 1.0}


def _client(hosts: str, **options: Any) -> kazoo_client.KazooClient:
    client = kazoo_client.KazooClient(hosts=hosts, timeout=4.0, **options)
    client.start(timeout=10)
    return client


@pytest.fixture
def zk(zookeeper_hosts: str) -> Iterator[kazoo_client.KazooClient]:
    client = _client(zookeeper_hosts)
    yield client
    client.stop()
    client.close()


def _wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@contextlib.contextmanager
def _own_zookeeper(clients: int = 1) -> Iterator[tuple[Any, ...]]:
    """A ZooKeeper of this test's own (to kill and restart) and ``clients`` started
    clients on it: (server, client, ...); the clients are stopped and closed after."""
    from lockcore.zkserver import ZooKeeperServer

    with ZooKeeperServer() as server:
        started = [_client(server.hosts) for _ in range(clients)]
        try:
            yield (server, *started)
        finally:
            for client in started:
                client.stop()
                client.close()


def _outcome_within(action, seconds: float, hung: str) -> tuple[object, float]:
    """Run ``action`` on a thread: (what it returned or raised, how long it took).

    Fails with ``hung`` if it is still running after ``seconds``: kazoo alone waits for
    a lost connection with no limit, and the thread is left behind (a daemon)."""
    outcome: list[object] = []

    def run() -> None:
        began = time.monotonic()
        try:
            outcome.append(action())
        except Exception as exc:  # the caller asserts which
            outcome.append(exc)
        outcome.append(time.monotonic() - began)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), hung
    return outcome[0], float(outcome[1])  # type: ignore[arg-type]


def test_a_held_lock_refuses_a_second_handle_until_released(zk, request) -> None:
    name = request.node.name
    first = lockcore.create("zookeeper", zk, name)
    second = lockcore.create("zookeeper", zk, name)
    assert first.acquire(blocking=False)
    assert first.locked() and first.held()
    assert not second.acquire(blocking=False)
    assert not second.acquire(timeout=0.2)
    first.release()
    assert second.acquire(blocking=False)
    second.release()
    assert not first.locked()


@pytest.mark.parametrize("backend", ["client", "hosts"])
def test_a_handle_dropped_while_it_held_the_lock_frees_it(zk, zookeeper_hosts, request,
                                                         backend) -> None:
    """Its znode lives as long as the session: for a hosts string, the process's. The
    session listener kept the dropped handle alive, so the lock stayed held for good
    (a lockcore audit); a Redis lock's TTL frees such a handle's key."""
    import gc
    import weakref

    name = request.node.name
    where = zk if backend == "client" else zookeeper_hosts
    dropped = lockcore.create("zookeeper", where, name)
    assert dropped.acquire(blocking=False)
    gone = weakref.ref(dropped)
    del dropped
    gc.collect()
    assert gone() is None  # nothing keeps a held handle alive
    rival = lockcore.create("zookeeper", where, name)
    assert rival.acquire(timeout=5.0)
    rival.release()


def test_a_released_handle_dropped_later_deletes_nothing(zk, request) -> None:
    import gc

    name = request.node.name
    first = lockcore.create("zookeeper", zk, name)
    assert first.acquire(blocking=False)
    first.release()
    assert first._orphan is None and first._listener is None  # detached, removed
    second = lockcore.create("zookeeper", zk, name)
    assert second.acquire(blocking=False)
    listeners = len(zk.state_listeners)
    del first
    gc.collect()
    assert second.held()
    second.release()
    assert len(zk.state_listeners) == listeners - 1  # the second's, at its release


def test_a_dropped_holders_listener_goes_with_it(zk, request) -> None:
    import gc

    before = len(zk.state_listeners)
    dropped = lockcore.create("zookeeper", zk, request.node.name)
    assert dropped.acquire(blocking=False)
    assert len(zk.state_listeners) == before + 1
    del dropped
    gc.collect()
    assert len(zk.state_listeners) == before  # it lingered until a state change


def test_a_lock_nobody_ever_queued_for_is_not_locked(zk, request) -> None:
    lock = lockcore.create("zookeeper", zk, request.node.name + "-never-used")
    assert lock.locked() is False  # its queue's znode does not exist at all
    assert lock.held() is False


def test_a_timed_out_waiter_leaves_no_znode_behind(zk, request) -> None:
    holder = lockcore.create("zookeeper", zk, request.node.name)
    holder.acquire()
    waiter = lockcore.create("zookeeper", zk, request.node.name)
    assert not waiter.acquire(timeout=0.3)
    assert zk.get_children(holder.path) == [holder._recipe.node]
    holder.release()


def test_a_lost_create_reply_leaves_one_node_and_the_lock_is_acquired(
        zk, request, monkeypatch) -> None:
    """Seed 001's ghost node, through our wrapper: ZooKeeper makes the node but the reply
    is lost (ConnectionLoss). kazoo's retry, on our acquire thread (``Attempt``), must
    find that node by its UUID prefix and hold the lock on it, not queue a second one
    behind it (which would wait on its own ghost until its timeout)."""
    from kazoo.exceptions import ConnectionLoss

    real_create, made = zk.create, []

    def create_and_lose_reply(*args: Any, **kwargs: Any) -> str:
        monkeypatch.setattr(zk, "create", real_create)  # only the first reply is lost
        made.append(real_create(*args, **kwargs))
        raise ConnectionLoss(f"reply to create of {made[-1]} lost (the test's)")

    monkeypatch.setattr(zk, "create", create_and_lose_reply)
    lock = lockcore.create("zookeeper", zk, request.node.name)
    assert lock.acquire(timeout=5)
    assert len(made) == 1, "the fault never fired: this test would show nothing"
    lost_node = made[0].rsplit("/", 1)[1]
    assert zk.get_children(lock.path) == [lost_node]  # one child: no ghost
    assert lock._recipe.node == lost_node and lock.fencing_token == int(lost_node[-10:])
    lock.release()
    other = lockcore.create("zookeeper", zk, request.node.name)
    assert other.acquire(blocking=False)  # nobody's node was left in the queue
    other.release()


def test_fencing_tokens_grow_with_every_acquisition(zk, request) -> None:
    lock = lockcore.create("zookeeper", zk, request.node.name)
    tokens = []
    for _ in range(4):
        with lock:
            tokens.append(lock.fencing_token)
    assert tokens == sorted(set(tokens)) and len(tokens) == 4


def test_waiters_are_granted_the_lock_in_arrival_order(zk, request) -> None:
    holder = lockcore.create("zookeeper", zk, request.node.name)
    holder.acquire()
    grants: list[int] = []

    def wait_turn(i: int) -> None:
        lock = lockcore.create("zookeeper", zk, request.node.name)
        assert lock.acquire(timeout=30)
        grants.append(i)
        lock.release()

    threads = []
    for i in range(6):
        thread = threading.Thread(target=wait_turn, args=(i,))
        thread.start()
        threads.append(thread)
        # the next waiter arrives only once this one has queued its znode
        assert _wait_until(lambda n=i + 2: len(zk.get_children(holder.path)) == n)
    holder.release()
    for thread in threads:
        thread.join(30)
    assert grants == list(range(6))


def test_each_waiter_watches_only_its_own_predecessor(zk, request) -> None:
    # the docstring's "no thundering herd": kazoo's recipe does this, and a kazoo that
    # stopped doing it would pass every order and exclusion test. The watches are read
    # from the client's own table of data watchers (kazoo's, not a public API)
    holder = lockcore.create("zookeeper", zk, request.node.name)
    assert holder.acquire()

    def watched() -> dict[str, int]:
        return {path: len(watchers) for path, watchers in list(zk._data_watchers.items())
                if path.startswith(holder.path + "/") and watchers}

    waiters = [lockcore.create("zookeeper", zk, request.node.name) for _ in range(3)]
    threads = [threading.Thread(target=waiter.acquire, kwargs={"timeout": 30})
               for waiter in waiters]
    try:
        for queued, thread in enumerate(threads, start=2):
            thread.start()  # one at a time: each queues behind the one before
            assert _wait_until(lambda n=queued: len(zk.get_children(holder.path)) == n)
        assert _wait_until(lambda: sum(watched().values()) == 3)
        assert sorted(watched().values()) == [1, 1, 1], watched()  # three znodes, one each
    finally:  # each waiter in turn gets the lock and gives it up
        holder.release()
        for waiter, thread in zip(waiters, threads, strict=True):
            if thread.ident is not None:  # started
                thread.join(30)
                waiter.release()


def test_releasing_a_lock_not_held_raises(zk, request) -> None:
    lock = lockcore.create("zookeeper", zk, request.node.name)
    with pytest.raises(LockNotOwned):
        lock.release()


def test_context_manager_raises_lock_timeout_when_held_elsewhere(zk, request) -> None:
    holder = lockcore.create("zookeeper", zk, request.node.name)
    holder.acquire()
    with pytest.raises(LockTimeout):
        with lockcore.create("zookeeper", zk, request.node.name, timeout=0.2):
            pass
    holder.release()


def test_a_hosts_string_backend_shares_one_started_client(zookeeper_hosts, request) -> None:
    a = lockcore.create("zookeeper", zookeeper_hosts, request.node.name)
    b = lockcore.create("zookeeper", zookeeper_hosts, request.node.name)
    try:
        assert a.client is b.client
        with a:
            assert not b.acquire(blocking=False)
    finally:
        from lockcore.strategies.zookeeper_clients import close_shared_clients

        close_shared_clients()


def test_an_unreachable_hosts_string_holds_up_no_other_hosts(zookeeper_hosts, monkeypatch,
                                                              request) -> None:
    """A create() for an ensemble nobody answers waits for its own start, not others'."""
    from kazoo.exceptions import ConnectionLoss

    from lockcore.embedded import free_port
    from lockcore.strategies import zookeeper_clients

    monkeypatch.setattr(zookeeper_clients, "START_TIMEOUT_S", 4.0)
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    try:
        def start_unreachable() -> None:  # fails after START_TIMEOUT_S, checked below
            with contextlib.suppress(Exception):
                lockcore.create("zookeeper", nobody, request.node.name)

        stuck = threading.Thread(target=start_unreachable, daemon=True)
        stuck.start()
        time.sleep(0.5)  # it is connecting now
        lock, took = _outcome_within(
            lambda: lockcore.create("zookeeper", zookeeper_hosts, request.node.name), 10,
            "create() hung")
        assert took < 2.0, f"a reachable hosts string waited {took:.1f}s behind an unreachable one"
        assert stuck.is_alive(), "the unreachable start ended early: nothing overlapped"
        assert lock.acquire(timeout=5)
        lock.release()
        failed, took = _outcome_within(lambda: lockcore.create("zookeeper", nobody, "x"), 8,
                                       "create() with an unreachable hosts string hung")
        assert isinstance(failed, ConnectionLoss) and nobody in str(failed), failed
        assert took < 4.0 + 2.0, took
        stuck.join(8)
    finally:
        zookeeper_clients.close_shared_clients()


def test_an_expired_session_is_reported_as_a_lost_lock(zookeeper_hosts, zk, request) -> None:
    mine = _client(zookeeper_hosts)
    reasons: list[str] = []
    lock = lockcore.create("zookeeper", mine, request.node.name,
                           on_lost=lambda _lock, why: reasons.append(why))
    lock.acquire()
    # A second connection with our session id and password, then closed: the server
    # ends our session exactly as a timeout would (kazoo's own tests do this).
    ghost = kazoo_client.KazooClient(hosts=zookeeper_hosts, client_id=mine.client_id)
    ghost.start(timeout=10)
    ghost.stop()
    ghost.close()
    try:
        assert _wait_until(lambda: lock.lost)
        assert any("lost" in why or "suspended" in why for why in reasons)
        # the surer reason once the session is gone, whatever came first ("may expire")
        assert _wait_until(lambda: "session lost" in str(lock._lost_reason)), \
            lock._lost_reason
        other = lockcore.create("zookeeper", zk, request.node.name)
        assert other.acquire(timeout=10)  # the server deleted our ephemeral znode
        other.release()
        with pytest.raises(LockNotOwned):
            lock.release()
    finally:
        mine.stop()
        mine.close()


def test_a_release_after_our_znode_was_deleted_says_the_lock_was_not_ours(
        zookeeper_hosts, zk, request) -> None:
    # an operator (or a cleanup script) deleted the holder's znode: the delete of the
    # release finds nothing (NoNodeError), and returning normally would tell the holder
    # its section ran under the lock when another could have held it meanwhile
    lock = lockcore.create("zookeeper", zk, request.node.name)
    assert lock.acquire(timeout=10)
    other = _client(zookeeper_hosts)
    try:
        other.delete(f"{lock.path}/{lock._recipe.node}")
        rival = lockcore.create("zookeeper", other, request.node.name)
        assert rival.acquire(timeout=10)  # the lock was free for anyone
        with pytest.raises(LockNotOwned, match="znode is gone"):
            lock.release()
        rival.release()
    finally:
        other.stop()
        other.close()


class _HeldRecipe:
    """A kazoo ``Lock`` stand-in whose ``acquire`` wins once ``go`` is set."""

    path = "/held-recipe"

    def __init__(self) -> None:
        self.go = threading.Event()
        self.cancelled = threading.Event()
        self.released = 0

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        assert self.go.wait(10)
        return True

    def cancel(self) -> None:
        self.cancelled.set()  # a real recipe wakes; this one wins all the same

    def release(self) -> bool:
        self.released += 1
        return True


def test_an_abandoned_attempt_that_wins_after_all_passes_the_lock_on() -> None:
    # the caller left at its timeout (ZooKeeper away); the recipe won the lock when the
    # server came back, for nobody: kept, it would block every waiter for the session's
    # life (seed 001's ghost node, held)
    from lockcore.strategies.zookeeper_attempt import Attempt

    recipe = _HeldRecipe()
    attempt = Attempt(recipe, blocking=True, timeout=5)
    assert attempt.finished_within(0.05) is False  # the caller leaves
    assert recipe.cancelled.is_set()
    recipe.go.set()  # ... and the recipe wins after all
    assert attempt._done.wait(10)
    assert _wait_until(lambda: recipe.released == 1)
    assert attempt.gotten


def test_leaving_with_after_a_server_outage_raises_lock_lost(request) -> None:
    with _own_zookeeper() as (server, client):
        lock = lockcore.create("zookeeper", client, request.node.name)
        # "suspended", or "session lost" if the restart outlasted the session (a slow
        # machine): the later, surer reason replaces the first (075c032)
        with pytest.raises(LockLost, match="suspended|session lost"):
            with lock:
                server.kill()  # the holder's connection drops: SUSPENDED
                assert _wait_until(lambda: lock.lost)
                server.start()
                assert _wait_until(lambda: client.connected)


def test_acquire_while_zookeeper_is_down_fails_at_once_instead_of_hanging(request) -> None:
    from kazoo.exceptions import ConnectionLoss

    with _own_zookeeper() as (server, client):
        lock = lockcore.create("zookeeper", client, request.node.name)
        assert lock.acquire(timeout=2)
        lock.release()
        server.kill()
        assert _wait_until(lambda: not client.connected)
        outcome, _ = _outcome_within(lambda: lock.acquire(blocking=True, timeout=1), 5,
                                     "acquire(timeout=1) hung while ZooKeeper was down")
        assert isinstance(outcome, ConnectionLoss), outcome
        server.start()
        assert _wait_until(lambda: client.connected, 20)
        assert lock.acquire(timeout=5)  # back to normal once it reconnects
        lock.release()


def test_a_waiter_queued_when_zookeeper_goes_leaves_at_its_timeout(request) -> None:
    from kazoo.exceptions import ConnectionLoss
    from kazoo.recipe.lock import Lock as KazooLock

    from lockcore.strategies.zookeeper_attempt import LEAVE_GRACE_S

    with _own_zookeeper(clients=2) as (server, holding, waiting):
        holder = lockcore.create("zookeeper", holding, request.node.name)
        waiter = lockcore.create("zookeeper", waiting, request.node.name)
        line = KazooLock(holding, holder.path)
        assert holder.acquire(timeout=2)
        def kill_once_queued() -> None:  # not queued: no kill, and the acquire times out
            if _wait_until(lambda: len(line.contenders()) == 2):
                server.kill()

        threading.Thread(target=kill_once_queued, daemon=True).start()
        outcome, took = _outcome_within(lambda: waiter.acquire(timeout=2), 6,
                                        "a queued acquire(timeout=2) hung: ZooKeeper was down")
        assert isinstance(outcome, ConnectionLoss), outcome
        assert took < 2 + LEAVE_GRACE_S + 0.5, took
        server.start()
        assert _wait_until(lambda: holding.connected and waiting.connected, 20)
        # The abandoned attempt's znode goes (deleted by it, or with its session):
        # no ghost stays in line ahead of later waiters (seed 001).
        assert _wait_until(lambda: len(line.contenders()) <= 1, 15)
        try:
            holder.release()
        except LockNotOwned:
            pass  # its session expired during the outage: the server freed it
        later = lockcore.create("zookeeper", holding, request.node.name)
        assert later.acquire(timeout=5)
        later.release()


def test_a_release_while_zookeeper_is_down_raises_instead_of_hanging(request) -> None:
    from lockcore.strategies.zookeeper import RELEASE_WAIT_S

    with _own_zookeeper() as (server, client):
        holder = lockcore.create("zookeeper", client, request.node.name)
        assert holder.acquire(timeout=2)
        server.kill()
        assert _wait_until(lambda: not client.connected)
        outcome, took = _outcome_within(holder.release, RELEASE_WAIT_S + 3,
                                        "release() hung while ZooKeeper was down")
        assert isinstance(outcome, LockNotOwned), outcome
        assert took < RELEASE_WAIT_S + 0.5, took
        server.start()
        assert _wait_until(lambda: client.connected, 20)
        later = lockcore.create("zookeeper", client, request.node.name)
        assert later.acquire(timeout=10)  # the node went: deleted late, or with the session
        later.release()


def test_a_release_the_connection_s_loss_failed_is_sent_again_in_the_same_session(
        request) -> None:
    """The delete is in flight when the connection goes (ZooKeeper frozen, then killed
    and restarted with its data): kazoo fails it and never sends it again, the session
    survives, and its node held the lock for good (a ZooKeeper audit: 5 of 7 runs; the
    shop refused every purchase and reset until restarted). It is sent again."""
    import os
    import signal

    from kazoo.client import KazooClient

    from lockcore.strategies.zookeeper_release import unreleased
    from lockcore.zkserver import ZooKeeperServer

    with ZooKeeperServer() as server:
        # a session that outlives the restart: what a shop's client has across a blip
        client = KazooClient(hosts=server.hosts, timeout=60.0,  # the longest: the next test
                             connection_retry=RECONNECT_FOR_EVER)
        client.start(timeout=10)
        other = _client(server.hosts, connection_retry=RECONNECT_FOR_EVER)
        try:
            session = client.client_id[0]
            holder = lockcore.create("zookeeper", client, request.node.name)
            assert holder.acquire(timeout=2)
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)  # the delete goes out, and no answer
            with pytest.raises(LockNotOwned):
                holder.release()
            os.kill(server.pid, signal.SIGKILL)  # dies with the delete unread (kill()
            server.kill()  # alone would let it go on first, and answer it), then reaped
            server.start()
            assert _wait_until(lambda: client.connected and other.connected, 60)
            assert client.client_id[0] == session  # the same session: its node lives on
            later = lockcore.create("zookeeper", other, request.node.name)
            assert later.acquire(timeout=10), client.get_children(holder.path)
            later.release()
            assert _wait_until(lambda: not unreleased(client), 5)
        finally:
            for started in (client, other):
                started.stop()
                started.close()


def test_a_waiter_that_gave_up_while_zookeeper_froze_leaves_no_node_behind(request) -> None:
    """A waiter's timeout runs out while ZooKeeper is frozen: kazoo's cleanup sends the
    delete of its node, and ZooKeeper dies before reading it. kazoo swallowed the
    failure; the session survived the restart, and its node sat at the head of the
    queue for good (a second ZooKeeper audit: the shop refused every purchase and reset
    until restarted). The delete is sent again once the session is back."""
    import os
    import signal

    from kazoo.client import KazooClient

    from lockcore.zkserver import ZooKeeperServer

    with ZooKeeperServer() as server:
        # outlives the restart: the server's longest session (20 s expired in a suite run
        # beside load tests: a JVM starting on a busy machine)
        client = KazooClient(hosts=server.hosts, timeout=60.0,
                             connection_retry=RECONNECT_FOR_EVER)
        client.start(timeout=10)
        other = _client(server.hosts, connection_retry=RECONNECT_FOR_EVER)
        try:
            holder = lockcore.create("zookeeper", client, request.node.name)
            assert holder.acquire(timeout=2)
            waiter = lockcore.create("zookeeper", client, request.node.name)
            outcome: list[object] = []

            def wait() -> None:
                try:
                    outcome.append(waiter.acquire(timeout=1.5))
                except Exception as exc:  # ConnectionLoss: the test asserts nothing of it
                    outcome.append(exc)

            thread = threading.Thread(target=wait, daemon=True)
            thread.start()
            assert _wait_until(lambda: len(client.get_children(holder.path)) == 2, 5)
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)  # the waiter's time runs out meanwhile
            thread.join(10)
            assert outcome and outcome[0] is not True, outcome
            os.kill(server.pid, signal.SIGKILL)  # its cleanup's delete dies unread
            server.kill()
            server.start()
            assert _wait_until(lambda: client.connected and other.connected, 60)
            holder.release()
            later = lockcore.create("zookeeper", other, request.node.name)
            assert later.acquire(timeout=10), client.get_children(holder.path)
            later.release()
        finally:
            for started in (client, other):
                started.stop()
                started.close()


def test_locked_and_held_while_zookeeper_is_down_raise_instead_of_hanging(request) -> None:
    from kazoo.exceptions import ConnectionLoss

    with _own_zookeeper() as (server, client):
        lock = lockcore.create("zookeeper", client, request.node.name)
        assert lock.acquire(timeout=2)
        assert lock.locked()
        server.kill()
        assert _wait_until(lambda: not client.connected)
        outcome, took = _outcome_within(lock.locked, 5,
                                        "locked() hung while ZooKeeper was down")
        assert isinstance(outcome, ConnectionLoss), outcome
        assert took < 1.0, took
        other = lockcore.create("zookeeper", client, request.node.name)
        outcome, _ = _outcome_within(other.locked, 5, "locked() hung while ZooKeeper was down")
        assert isinstance(outcome, ConnectionLoss), outcome
        # the holder's handle already knows (SUSPENDED marked it lost): no call to hang
        assert _wait_until(lambda: lock.lost)
        assert lock.held() is False
        server.start()
        assert _wait_until(lambda: client.connected, 20)
        assert isinstance(other.locked(), bool)  # answers again once it reconnects


def test_a_hosts_string_client_is_back_soon_after_a_long_outage(request) -> None:
    """``create("zookeeper", "<hosts>")``'s shared client retried its connection with
    kazoo's backoff, doubling towards an hour: after 15 s down it came back ~10 s after
    the server did. Its waits are capped at ``RECONNECT_MAX_S``."""
    from lockcore.strategies.zookeeper_clients import (
        RECONNECT_MAX_S,
        close_shared_client,
        shared_client,
    )
    from lockcore.zkserver import ZooKeeperServer

    with ZooKeeperServer() as server:
        client = shared_client(server.hosts)
        request.addfinalizer(lambda: close_shared_client(server.hosts))
        server.kill()
        assert _wait_until(lambda: not client.connected)
        time.sleep(15)  # long enough for kazoo's own backoff to reach ~13 s
        server.start()
        began = time.monotonic()
        assert _wait_until(lambda: client.connected, 30)
        assert time.monotonic() - began < RECONNECT_MAX_S + 2.5, time.monotonic() - began
        lock = lockcore.create("zookeeper", server.hosts, request.node.name)
        assert lock.acquire(timeout=5)
        lock.release()


NAMES = ["a/b", "a%2Fb", "🔒", "nul\x00", "line\nbreak", ".", "..", "%", "stock:sku-1"]


@pytest.mark.parametrize("name", NAMES, ids=repr)
def test_any_name_a_redis_lock_takes_is_a_zookeeper_lock_too(zk, name):
    # kazoo refused a NUL, a newline or a character past U+FFFF at acquire, and "." at
    # create; every Redis strategy takes them
    lock = lockcore.create("zookeeper", zk, name)
    assert lock.acquire(timeout=5)
    assert lock.fencing_token is not None
    lock.release()


def test_two_names_never_share_a_lock(zk):
    from lockcore.strategies.zookeeper import znode_name

    assert len({znode_name(n) for n in NAMES}) == len(NAMES)
    first = lockcore.create("zookeeper", zk, "a/b")
    assert first.acquire(timeout=5)
    try:  # "a%2Fb" was the same znode as "a/b": held by first
        assert lockcore.create("zookeeper", zk, "a%2Fb").acquire(blocking=False)
    finally:
        first.release()


@pytest.mark.filterwarnings("ignore:This process .* fork:DeprecationWarning")  # Python 3.12+
def test_a_forked_child_starts_its_own_shared_client(zookeeper_hosts, request) -> None:
    # the child got the parent's client, whose threads had not come along: a free lock
    # was refused after the timeout, and acquire() without one hung (an outside audit)
    import os
    import signal

    name = f"forked-{request.node.name}"
    parent = lockcore.create("zookeeper", zookeeper_hosts, name)
    assert parent.acquire(timeout=5)
    parent.release()
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if it got the free lock
        code = 1
        try:
            child = lockcore.create("zookeeper", zookeeper_hosts, name)
            if child.acquire(timeout=8):
                child.release()
                code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    if done == (0, 0):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung in acquire")
    assert os.waitstatus_to_exitcode(done[1]) == 0, "the forked child could not take a free lock"
    try:
        assert parent.acquire(timeout=5)  # the parent's session is untouched
        parent.release()
    finally:
        from lockcore.strategies.zookeeper_clients import close_shared_clients

        close_shared_clients()


@pytest.mark.filterwarnings("ignore:This process .* fork:DeprecationWarning")  # Python 3.12+
def test_handles_from_before_a_fork_take_the_childs_client_or_say_why_they_cannot(
        zookeeper_hosts, request) -> None:
    """A handle made in the parent (hosts string or KazooClient), used in a forked child
    on a free lock: False after the timeout, as if the lock were held (a lockcore
    audit). The hosts-string handle now takes the child's own shared client; one on the
    parent's KazooClient, whose connection thread did not come along, says so."""
    import os
    import signal

    from kazoo.client import KazooClient

    name = f"forked-{request.node.name}"
    by_hosts = lockcore.create("zookeeper", zookeeper_hosts, name)
    assert by_hosts.acquire(timeout=5)
    by_hosts.release()
    client = KazooClient(hosts=zookeeper_hosts)
    client.start(timeout=15)
    by_client = lockcore.create("zookeeper", client, name + "-client")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: writes what it saw, one line
        said = "?"
        try:
            got = by_hosts.acquire(timeout=3)
            if got:
                by_hosts.release()
            try:
                by_client.acquire(timeout=3)
                refused = "no error"
            except Exception as exc:  # noqa: BLE001 - reported to the parent
                refused = f"{type(exc).__name__}: {exc}"
            said = f"{got}|{refused}"
        finally:
            os.write(write, said.encode())
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        if done == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        got, refused = os.read(read, 4096).decode().split("|", 1)
        assert got == "True", "the hosts-string handle could not take a free lock"
        assert refused.startswith("ConnectionLoss") and "started before a fork" in refused, \
            refused
        assert by_client.acquire(timeout=5)  # the parent's client is untouched
        by_client.release()
    finally:
        os.close(read)
        client.stop()
        client.close()
        from lockcore.strategies.zookeeper_clients import close_shared_clients

        close_shared_clients()


def test_a_client_never_started_is_named_as_such() -> None:
    # the message said only "state LOST", as for a session that expired
    from kazoo.client import KazooClient
    from kazoo.exceptions import ConnectionLoss

    client = KazooClient(hosts="127.0.0.1:1")  # never started: nothing is dialled
    lock = lockcore.create("zookeeper", client, "never-started")
    with pytest.raises(ConnectionLoss, match=r"not started: call its start\(\)"):
        lock.acquire(timeout=1)
    with pytest.raises(ConnectionLoss, match="not started"):
        lock.locked()


def test_a_name_too_long_for_zookeeper_is_refused_at_create(zookeeper_hosts):
    # a 1.1 MB name: every create failed, the shared session dropped again and again,
    # acquire said "held", and another lock on that session was lost (a lockcore audit)
    with pytest.raises(ValueError, match="at most 16384 bytes"):
        lockcore.create("zookeeper", zookeeper_hosts, "x" * 20_000)
    assert lockcore.create("zookeeper", zookeeper_hosts, "x" * 10_000).path.endswith("x")


@pytest.mark.parametrize("name, options, error", [
    ("", {}, TypeError), ("x", {"bogus": 1}, TypeError), ("x", {"wait": "spin"}, ValueError),
    ("x" * 20_000, {}, ValueError),
])
def test_a_bad_name_or_option_is_refused_before_connecting(monkeypatch, name, options,
                                                           error) -> None:
    """A hosts string is dialled by ``shared_client``, up to 15 s for an unreachable
    one: ``create("zookeeper", hosts, "")`` or ``bogus=1`` waited that long and raised
    ``ConnectionLoss`` instead of saying what was wrong (a lockcore audit)."""
    from lockcore.strategies import zookeeper

    def dial(hosts: str) -> None:
        raise AssertionError(f"connected to {hosts} before checking the arguments")

    monkeypatch.setattr(zookeeper, "shared_client", dial)
    with pytest.raises(error):
        lockcore.create("zookeeper", "127.0.0.1:1", name, **options)


@pytest.mark.parametrize("hosts, problem", [
    ("", "bad hostname"), ("127.0.0.1:2181,", "bad hostname"),
    ("garbage::x", "Port could not be cast"), ("zk://127.0.0.1:2181", "not a URL"),
])
def test_a_bad_hosts_string_is_refused_naming_it(monkeypatch, hosts, problem) -> None:
    """kazoo's own ``ValueError("bad hostname")`` named no argument, and ``zk://...``
    was dialled as a host named ``zk`` for 15 s (a lockcore audit)."""
    from lockcore.strategies import zookeeper

    def dial(hosts: str) -> None:
        raise AssertionError(f"dialled {hosts!r}")

    monkeypatch.setattr(zookeeper, "shared_client", dial)
    with pytest.raises(ValueError, match="is not a hosts string") as refused:
        lockcore.create("zookeeper", hosts, "x")
    assert repr(hosts) in str(refused.value) and problem in str(refused.value)


def test_a_session_closed_under_the_holder_is_reported_as_a_lost_lock(zookeeper_hosts, zk,
                                                                      request) -> None:
    """Closing the session (``stop()``: a shutdown, another thread) goes straight to LOST,
    with no SUSPENDED first: the LOST branch alone must report it, for the server has
    deleted our znode and the next waiter holds the lock."""
    mine = _client(zookeeper_hosts)
    reasons: list[str] = []
    lock = lockcore.create("zookeeper", mine, request.node.name,
                           on_lost=lambda _lock, why: reasons.append(why))
    try:
        assert lock.acquire(timeout=10)
        mine.stop()
        assert _wait_until(lambda: lock.lost)
        assert reasons and "session lost" in reasons[0]
        other = lockcore.create("zookeeper", zk, request.node.name)
        assert other.acquire(timeout=10)  # the session's end deleted our znode
        other.release()
    finally:
        mine.stop()
        mine.close()
