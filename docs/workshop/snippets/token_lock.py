"""Lesson 4: the token lock on a redis-server of our own (never your 6379)."""

import time

import redis

import lockcore
from lockcore.embedded import EmbeddedRedis

with EmbeddedRedis(nodes=1) as cluster:
    client = redis.Redis.from_url(cluster.urls[0])

    a = lockcore.create("token", client, "stock:sku-1", ttl_ms=300)
    b = lockcore.create("token", client, "stock:sku-1", ttl_ms=300)
    print("A acquires:", a.acquire(blocking=False), "fencing token", a.fencing_token)
    print("B acquires:", b.acquire(blocking=False))
    print("value in Redis is A's random token:", client.get(a.key).decode() == a.token)

    time.sleep(0.4)  # A is slower than its TTL
    print("B acquires after A's TTL:", b.acquire(blocking=False),
          "fencing token", b.fencing_token)
    try:
        a.release()
    except lockcore.LockNotOwned as exc:
        print("A's late release is refused:", type(exc).__name__)
    print("B still holds it:", b.held())
    b.release()
    client.close()
