"""The shop's Redis must take writes, answer for all its keys and keep them: a replica and
a multi-shard cluster are refused at start, an evicting Redis is named in a note, and
``/healthz`` says a Redis that stopped taking writes is down (a Redis audit served the
shop against each)."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from lockcore.embedded import RedisServer, find_redis_server, free_ports, serving_pid
from lockcore.lifeline import tied_to_parent
from tests.clustermode import start_cluster, start_cluster_nodes, stopped_after
from tests.webapp.conftest import make_app
from webapp import sales
from webapp.served import (
    StartupError,
    _redis_info,
    reachable_redis,
    unfit_redis,
)

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def started() -> Iterator[list[RedisServer]]:
    """The redis-servers a test starts, stopped by pid after it."""
    servers: list[RedisServer] = []
    yield servers
    for server in servers:
        server.cleanup()


def start(started: list[RedisServer], *args: str, port: int | None = None) -> RedisServer:
    server = RedisServer(port=port, args=list(args)).start()
    started.append(server)
    return server


def replica_of(started: list[RedisServer]) -> tuple[RedisServer, RedisServer]:
    primary, replica = start(started), start(started)
    client = redis.Redis.from_url(replica.url)
    client.replicaof("127.0.0.1", primary.port)
    deadline = time.monotonic() + 15
    while client.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica never linked to its primary"
        time.sleep(0.05)
    client.close()
    return primary, replica


def test_a_replica_is_refused_at_start_and_its_primary_is_not(started):
    primary, replica = replica_of(started)
    with pytest.raises(StartupError, match="read-only replica"):
        reachable_redis(replica.url)
    reachable_redis(primary.url)


def test_healthz_says_redis_is_down_when_it_stops_taking_writes(started, sqlite_url):
    """A primary turned replica under the shop: every purchase was a 503 while
    ``/healthz`` answered 200 ``{"redis": "ok"}`` (it sent a PING)."""
    primary, replica = start(started), start(started)
    app = make_app(sqlite_url, replica.url)
    try:
        client = app.test_client()
        assert client.get("/healthz").get_json()["redis"] == "ok"
        shop = app.extensions["seckill"]
        sales.create_product(shop.sessions, "sku-ro", "Lamp", 100, stock=3,
                             strategy="atomic")
        sales.reset_sale(shop.sessions, shop.redis, "sku-ro", stock=3, strategy="atomic")
        redis.Redis.from_url(replica.url).replicaof("127.0.0.1", primary.port)
        answer = client.get("/healthz")
        assert answer.status_code == 503, answer.get_json()
        assert answer.get_json()["redis"].startswith("down: "), answer.get_json()
        # in Redis's words, and a buyer hears a refusal, not "unavailable" (a Redis audit)
        assert "ReadOnlyError (" in answer.get_json()["redis"], answer.get_json()
        bought = client.post("/api/products/sku-ro/purchase", json={"user_id": "ann"})
        assert bought.status_code == 503, bought.get_json()
        assert "refused" in bought.get_json()["detail"], bought.get_json()
    finally:
        app.extensions["seckill"].close()


def test_a_cluster_of_two_shards_is_refused_and_a_one_node_cluster_is_not():
    """serve against a three-node cluster failed with a raw ``MovedError`` from its
    first pipeline; a one-node cluster owning every slot never redirects (the hash-tag
    tests run the shop on one)."""
    with stopped_after(start_cluster_nodes(1)) as (alone,):
        assert unfit_redis(_redis_info(alone.url)) is None
        reachable_redis(alone.url)
    with stopped_after(start_cluster(2)) as nodes:
        with pytest.raises(StartupError, match="Redis Cluster of 2 shards"):
            reachable_redis(nodes[0].url)


@pytest.mark.parametrize(("args", "noted"), [
    (("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"),
     ("maxmemory-policy noeviction", "allkeys-lru")),
    (("--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"),  # lock keys have TTLs
     ("maxmemory-policy noeviction", "volatile-ttl")),
    (("--maxmemory", "64mb", "--maxmemory-policy", "noeviction"), ()),
    # a Redis audit: SAVE mid-sale, kill -9, back from dump.rdb: 26 oversold, no note
    (("--save", "60 1"), ("save 60 1", "appendonly yes")),
    (("--save", "60 1", "--appendonly", "yes", "--appendfsync", "always"), ()),
    (("--save", "", "--appendonly", "yes", "--appendfsync", "everysec"),
     ("'everysec'", "appendfsync always")),
    ((), ()),  # save "", no maxmemory: back empty, reloaded from the database
], ids=["allkeys-lru", "volatile-ttl", "noeviction", "snapshots", "append-only",
        "append-only-everysec", "as-embedded"])
def test_a_redis_that_may_lose_or_evict_the_sale_is_named_in_a_note(started, args, noted):
    server = start(started, *args)
    notes = reachable_redis(server.url)
    assert bool(notes) == bool(noted), notes
    assert all(part in notes[0] for part in noted), notes


def test_a_primary_with_replicas_is_named_in_a_note(started):
    """serve noted snapshots and eviction, not a replica a failover may promote with
    older data (a Redis HA audit); a primary alone is not noted."""
    primary, _ = replica_of(started)
    notes = reachable_redis(primary.url)
    assert len(notes) == 1 and "1 replica:" in notes[0], notes
    assert "does not follow a failover" in notes[0], notes
    assert reachable_redis(start(started).url) == []


def test_an_acl_user_without_info_is_served_unchecked(started, tmp_path: Path):
    """``INFO`` is a @dangerous command; a shop user without it still starts."""
    server = start(started)
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser("shop", enabled=True, passwords=["+pw"], keys=["*"],
                      commands=["+@all", "-@dangerous"])
    admin.close()
    url = f"redis://shop:pw@127.0.0.1:{server.port}/0"
    assert reachable_redis(url) == []


@contextlib.contextmanager
def a_sentinel(workdir: Path) -> Iterator[str]:
    """A Redis Sentinel watching a primary that is not there (it answers all the same),
    its URL; killed by pid after. (``RedisServer`` puts its options first, and a
    Sentinel needs its config file first.)"""
    port, watched = free_ports(2)
    conf = workdir / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\n"
                    f"sentinel monitor m 127.0.0.1 {watched} 1\n")
    proc = subprocess.Popen(tied_to_parent([find_redis_server(), str(conf), "--sentinel",
                                            "--logfile", str(workdir / "sentinel.log")],
                                           "KILL"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while serving_pid(port) != proc.pid:
            assert proc.poll() is None and time.monotonic() < deadline, \
                (workdir / "sentinel.log").read_text(errors="replace")[-800:]
            time.sleep(0.01)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_sentinel_is_refused_at_start_naming_it(tmp_path):
    """serve against a Sentinel failed with "Busy: ... Redis refused the new stock
    (unknown command 'WATCH')" on a fresh database and "ResponseError: unknown command
    'HGETALL'" on one with orders (a Redis HA audit)."""
    with a_sentinel(tmp_path) as url:
        with pytest.raises(StartupError) as refused:
            reachable_redis(url)
    said = str(refused.value)
    assert said.startswith(f"REDIS_URL {url}: a Redis Sentinel"), said
    assert "primary" in said and "does not follow a failover" in said and "\n" not in said
