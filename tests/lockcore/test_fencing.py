"""Fenced writes: the store refuses a write whose fencing token is older than one it saw."""

from __future__ import annotations

import time

import pytest

import lockcore
from lockcore import FencingTokenRejected
from lockcore.fencing import FencedStore, fenced_write


def test_a_stale_holders_write_is_rejected_after_a_newer_one(redis_client):
    store = FencedStore(redis_client)
    store.write("stock:sku-1", 9, fencing_token=34)
    with pytest.raises(FencingTokenRejected) as caught:
        store.write("stock:sku-1", 10, fencing_token=33)
    assert caught.value.highest_seen == 34 and caught.value.token == 33
    assert store.read("stock:sku-1") == b"9"
    assert store.highest_token("stock:sku-1") == 34


def test_the_same_holder_may_write_twice_and_a_newer_one_after_it(redis_client):
    store = FencedStore(redis_client)
    store.write("k", "a", fencing_token=5)
    store.write("k", "b", fencing_token=5)
    fenced_write(redis_client, "k", "c", 6)
    assert store.read("k") == b"c"


def test_fencing_stops_a_holder_that_was_paused_past_its_ttl(redis_client):
    # The timeline the watchdog cannot fix: the paused holder still believes it holds.
    store = FencedStore(redis_client)
    paused = lockcore.create("token", redis_client, "stock:sku-1", ttl_ms=50)
    assert paused.acquire()
    time.sleep(0.1)  # "GC pause" past the ttl
    successor = lockcore.create("token", redis_client, "stock:sku-1")
    assert successor.acquire(blocking=False)
    store.write("stock:sku-1", 99, successor.fencing_token)
    with pytest.raises(FencingTokenRejected):
        store.write("stock:sku-1", 100, paused.fencing_token)
    assert store.read("stock:sku-1") == b"99"


def test_a_fencing_token_must_be_an_int(redis_client):
    with pytest.raises(TypeError):
        FencedStore(redis_client).write("k", 1, fencing_token=None)  # type: ignore[arg-type]
