"""lockcore's lanes (``lockcore.wire``): its own connections, kept in step with Redis.

A lane skips redis-py's per-command machinery, so what that machinery guarded is
checked here: a reply that never arrived must not reach the next caller, a forked
child must not share its parent's socket, a closed client must still work, and a
flushed script cache must still run the script.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest
import redis

from lockcore import scripts, wire
from lockcore.embedded import RedisServer


def test_a_plain_client_gets_one_lane_and_a_pipeline_none(redis_client):
    found = wire.lane(redis_client)
    assert isinstance(found, wire.Lane)
    assert wire.lane(redis_client) is found
    assert wire.lane(redis_client.pipeline()) is None
    assert not isinstance(scripts.script(redis_client.pipeline(), "signal"), scripts.LaneScript)


def test_the_script_runs_on_the_lane_and_survives_a_flushed_script_cache(redis_client):
    acquire = scripts.script(redis_client, "token_acquire")
    assert isinstance(acquire, scripts.LaneScript)
    assert acquire(keys=["lock:w", "lock:w:fence"], args=["a", 10_000]) == [1, 1]
    redis_client.script_flush()
    reply = acquire(keys=["lock:w", "lock:w:fence"], args=["b", 10_000])
    assert reply[0] == 0 and 0 < reply[1] <= 10_000
    assert redis_client.script_exists(acquire.sha) == [True]


def test_a_redis_error_is_raised_and_the_connection_stays_in_step(redis_client):
    lane = wire.lane(redis_client)
    redis_client.set("text", "not a number")
    with pytest.raises(redis.ResponseError):
        lane.call("INCR", "text")
    assert lane.call("ECHO", "next") == b"next"


def test_a_reply_lost_to_a_timeout_never_reaches_the_next_caller(redis_server):
    client = redis.Redis.from_url(redis_server.url, socket_timeout=0.1)
    try:
        lane = wire.lane(client)
        with pytest.raises(redis.TimeoutError):
            lane.call("BLPOP", "wire:late", 1)  # still blocked in Redis when we give up
        client.rpush("wire:late", "stale")  # answers that BLPOP, if it were still there
        assert lane.call("ECHO", "mine") == b"mine"
        assert client.lpop("wire:late") == b"stale"  # nobody popped it on a dead socket
    finally:
        client.close()


def test_a_closed_client_reconnects_on_its_lane(redis_client):
    lane = wire.lane(redis_client)
    assert lane.call("PING") == b"PONG"
    redis_client.close()
    assert lane._idle[0]._sock is None  # the pool's close reached the lane's connection
    assert lane.call("ECHO", "again") == b"again"


def _client_id_in_child(lane: wire.Lane, answers: multiprocessing.Queue) -> None:
    answers.put(lane.call("CLIENT", "ID"))


def test_a_forked_child_does_not_share_its_parents_connection(redis_client):
    lane = wire.lane(redis_client)
    parent_id = lane.call("CLIENT", "ID")  # leaves one idle connection on the lane
    fork = multiprocessing.get_context("fork")
    answers = fork.Queue()
    child = fork.Process(target=_client_id_in_child, args=(lane, answers))
    child.start()
    try:
        child_id = answers.get(timeout=10)
    finally:
        child.join(10)
    assert child.exitcode == 0
    assert child_id != parent_id
    assert lane.call("CLIENT", "ID") == parent_id  # the parent's is still the parent's
    assert os.getpid() == lane._pid


def test_a_blocking_pool_a_tiny_pool_or_a_subclass_gets_no_lane(redis_server):
    class Wrapping(redis.Redis):
        pass

    tiny = redis.Redis.from_url(redis_server.url, max_connections=3)
    blocking = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(
        redis_server.url))
    wrapping = Wrapping.from_url(redis_server.url)
    for client in (tiny, blocking, wrapping):
        assert wire.lane(client) is None
        client.close()


def test_a_lane_keeps_at_most_a_quarter_of_the_pool_and_lends_the_rest(redis_server):
    client = redis.Redis.from_url(redis_server.url, max_connections=8)
    try:
        lane = wire.lane(client)
        assert lane.size == 2
        taken = [lane.take() for _ in range(3)]
        assert [ours for _, ours in taken] == [True, True, False]
        for connection, ours in taken:
            lane.give_back(connection, ours)
        assert len(client.connection_pool._in_use_connections) == 2  # the third went back
        assert client.ping()  # and the pool still serves its own callers
    finally:
        client.close()


def test_after_a_server_restart_the_next_call_reconnects_instead_of_failing():
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(server.url)
        lane = wire.lane(client)
        assert lane.call("SET", "before", "1")  # leaves one idle connection
        server.kill()  # a crash: the idle connection's socket is closed under it
        server.start()
        assert lane.call("ECHO", "after") == b"after"
        scripts.script(client, "signal")(keys=["lock:r:signal"], args=[1_000])
        client.close()
    finally:
        server.cleanup()


@pytest.mark.parametrize("strategy", ["token", "fair", "multi"])
def test_a_warm_client_rides_out_a_short_restart_as_redis_py_does(strategy):
    """A lane connection the restart had closed reconnected inside the send, which
    tries once: a warm client's acquire raised ``ConnectionError`` at once during a
    restart of a fraction of a second, where redis-py's own path (``naive``) and a
    fresh client retried the refused connect and took the lock (a lockcore audit)."""
    import threading
    import time

    import lockcore

    server = RedisServer().start()
    try:
        # redis-py's default client retries a refused connect (from_url's does not)
        client = redis.Redis(host="127.0.0.1", port=server.port)
        lock = lockcore.create(strategy, client, f"restart-{strategy}")
        assert lock.acquire(blocking=False)  # the lane's connection, now idle
        lock.release()
        server.kill()
        took: list[float | BaseException] = []

        def acquire() -> None:
            started = time.monotonic()
            try:
                assert lock.acquire(timeout=5.0)  # refused at first: redis-py's backoff
                took.append(time.monotonic() - started)
                lock.release()
            except BaseException as exc:  # noqa: BLE001 - judged below
                took.append(exc)

        buyer = threading.Thread(target=acquire)
        buyer.start()
        time.sleep(0.5)
        server.start()  # here: redis-server dies with the thread that started it
        buyer.join(15)
        assert len(took) == 1 and isinstance(took[0], float) and took[0] > 0.4, took
        client.close()
    finally:
        server.cleanup()


@pytest.mark.parametrize("path", ["lane", "pool"])
def test_a_refused_client_reply_leaves_no_reply_for_the_next_caller(
        client_without_client, path):
    """A batch that silences a reply with ``CLIENT REPLY SKIP`` reads one reply fewer
    than it sends commands. Refused CLIENT (an ACL user's ``-client``), every command
    answers: the connection went back with replies unread, already in hiredis's buffer
    where a peek of the socket does not see them, and the next caller read one of them
    as its own (a lockcore audit: a holder's release raised ``LockNotOwned``)."""
    client = client_without_client
    if path == "pool":  # no lane: a pool's connection, given back to the pool
        client = redis.Redis(connection_pool=redis.BlockingConnectionPool(
            **client.connection_pool.connection_kwargs))
    lane = wire.lane(client)
    assert (lane is None) == (path == "pool")
    refused, = wire.round_trip(client, [("CLIENT", "REPLY", "SKIP"), ("SET", "wire:k", "1"),
                                        ("ECHO", "stale")], replies=1)
    assert isinstance(refused, redis.exceptions.NoPermissionError)
    mine = lane.call("ECHO", "mine") if lane is not None else \
        wire.round_trip(client, [("ECHO", "mine")], replies=1)[0]
    assert mine == b"mine"
    if client is not client_without_client:
        client.close()
