"""Lesson 5: a paused holder wakes up and writes; the store refuses its stale token."""

import time

import redis

import lockcore
from lockcore.embedded import EmbeddedRedis
from lockcore.fencing import FencedStore

with EmbeddedRedis(nodes=1) as cluster:
    client = redis.Redis.from_url(cluster.urls[0])
    store = FencedStore(client)

    a = lockcore.create("token", client, "stock:sku-1", ttl_ms=200)
    a.acquire()
    print("A holds the lock with fencing token", a.fencing_token)
    time.sleep(0.3)  # A pauses (GC, swap) past its TTL; it does not know

    b = lockcore.create("token", client, "stock:sku-1", ttl_ms=200)
    b.acquire()
    store.write("stock:sku-1", 9, b.fencing_token)
    print("B holds it with fencing token", b.fencing_token, "and writes stock=9")

    try:
        store.write("stock:sku-1", 10, a.fencing_token)  # A wakes and writes
    except lockcore.FencingTokenRejected:
        print("A's write with token", a.fencing_token, "is rejected")
    print("stock is", store.read("stock:sku-1").decode())
    b.release()
    client.close()
