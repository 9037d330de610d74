"""lockcore under a Redis user that may not run every command (an ACL): a release
either frees the lock and says so, or raises and leaves it held, never both (a
lockcore audit: a user without TIME, ``+@read +@write +@scripting``, had ``fair``'s
release DEL the lock and then raise; one without EVALSHA had a plain DEL release
succeed and then raise from the waiters' wake-up)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
import redis

import lockcore
from lockcore.embedded import RedisServer


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    own = RedisServer().start()
    admin = redis.Redis.from_url(own.url)
    # what a careful operator grants: the lock keys, reads, writes, scripts; not TIME
    admin.acl_setuser("notime", enabled=True, passwords=["+pw"], keys=["~lock:*"],
                      commands=["+@read", "+@write", "+@scripting", "+@connection"])
    # and one with plain commands only, no scripts at all
    admin.acl_setuser("noscripts", enabled=True, passwords=["+pw"], keys=["~lock:*"],
                      commands=["+get", "+set", "+del", "+ping", "+hello", "+client"])
    admin.close()
    yield own
    own.stop()


def as_user(server: RedisServer, user: str) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, username=user, password="pw")


def test_a_release_refused_midway_leaves_the_lock_held(server, request):
    """The holder's connection is the user without TIME; a waiter (another service,
    with every right) is queued: the release must read Redis's clock to hand the lock
    on. It raised after its DEL: the lock free, and the caller told it was not."""
    name = request.node.name
    full = redis.Redis.from_url(server.url)
    holder = lockcore.create("fair", full, name, ttl_ms=10_000)
    assert holder.acquire(timeout=1)
    waiter = lockcore.create("fair", full, name, ttl_ms=10_000)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=10)))
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while not full.exists(f"lock:{{{name}}}:queue") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert full.exists(f"lock:{{{name}}}:queue"), "the waiter never queued"
        restricted = lockcore.create("fair", as_user(server, "notime"), name, ttl_ms=10_000)
        restricted._token = holder.token  # the holder's release, on the other connection
        with pytest.raises(redis.ResponseError):
            restricted.release()
        assert full.get(f"lock:{{{name}}}") == str(holder.token).encode()  # still held
    finally:
        holder.release()  # as a user who may: the waiter gets it
        thread.join(10)
        full.close()
    assert got == [True]
    waiter.release()


def test_a_release_that_freed_the_lock_does_not_raise_for_the_wake_up(server, request,
                                                                     caplog):
    name = request.node.name
    lock = lockcore.create("naive", as_user(server, "noscripts"), name)
    assert lock.acquire(timeout=1)
    assert redis.Redis.from_url(server.url).exists(f"lock:{{{name}}}")
    with caplog.at_level(logging.WARNING, logger="lockcore"):
        lock.release()  # its DEL went through; waking notify-waiters needs EVALSHA
    assert not redis.Redis.from_url(server.url).exists(f"lock:{{{name}}}")
    assert "could not wake a waiter" in caplog.text


def test_a_redlock_node_that_refuses_every_command_is_named_once(server, request, caplog):
    """A node with a wrong password is a "no" at every acquire: one of five left the
    majority one node to spare, and nothing said so (a lockcore audit)."""
    others = [RedisServer().start() for _ in range(2)]
    try:
        wrong = redis.Redis(host="127.0.0.1", port=server.port, username="notime",
                            password="not-the-password")
        clients = [redis.Redis.from_url(other.url) for other in others] + [wrong]
        with caplog.at_level(logging.WARNING, logger="lockcore"):
            for _ in range(3):
                lock = lockcore.create("redlock", clients, request.node.name)
                assert lock.acquire(timeout=2)  # two of three: a majority
                lock.release()
        told = [r for r in caplog.records if "refuses lockcore's commands" in r.getMessage()]
        assert len(told) == 1, caplog.text
        assert "redlock node 2" in told[0].getMessage()
        for client in clients:
            client.close()
    finally:
        for other in others:
            other.stop()
