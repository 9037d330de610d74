"""Past one machine: every key one script or transaction touches shares a hash slot.

Redis Cluster runs a script, a MULTI/EXEC or a multi-key command only when all of its
keys hash to one slot, which is why our keys carry hash tags (``lock:{name}``,
``sale:{sku}:...``). One Redis never checks this, so a cross-slot call works in the lab
and fails the day the deployment moves to a cluster. These tests run every path
against a real redis-server in cluster mode that owns all 16384 slots: it accepts
everything a single Redis would, except ``CROSSSLOT`` calls. A recording client lists
the keys of every script call, so a failure names the keys, and the test proves it
really exercised scripts. Scripts must also touch only keys passed in ``KEYS``
(a cluster routes by the declared keys), which a static check of the ``.lua`` files
enforces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import lockcore
from lockcore import registry
from lockcore.embedded import RedisServer
from tests.clustermode import RecordingRedis, start_cluster_nodes, stopped_after

REPO = Path(__file__).resolve().parent.parent
SCRIPT_DIRS = [REPO / "lockcore" / "scripts", REPO / "webapp" / "scripts"]
KEYLESS_COMMANDS = {"time", "ping", "echo"}


@pytest.fixture(scope="module")
def cluster_nodes() -> Iterator[list[RedisServer]]:
    """Five cluster-mode nodes: one serves single-Redis paths, five serve RedLock."""
    with stopped_after(start_cluster_nodes(5)) as nodes:
        yield nodes


@pytest.fixture
def cluster_clients(cluster_nodes: list[RedisServer]) -> Iterator[list[RecordingRedis]]:
    clients = [RecordingRedis.from_url(node.url) for node in cluster_nodes]
    for client in clients:
        client.flushall()
    yield clients
    for client in clients:
        client.close()


def test_the_cluster_node_rejects_a_script_whose_keys_span_two_slots(cluster_clients):
    # The premise of every test below: without it they could not fail.
    with pytest.raises(redis.ResponseError, match="same slot"):
        cluster_clients[0].eval("return 1", 2, "lock:{a}", "lock:{b}")
    assert cluster_clients[0].cross_slot_calls() == [("lock:{a}", "lock:{b}")]


def test_every_lua_script_touches_only_keys_it_is_given():
    """A cluster routes a script by its KEYS; a key built inside the script may live elsewhere."""
    call = re.compile(r"redis\.p?call\(\s*['\"](\w+)['\"]\s*(?:,\s*([^,)]+))?")
    offenders = []
    for path in sorted(p for d in SCRIPT_DIRS if d.exists() for p in d.glob("*.lua")):
        source = path.read_text()
        aliases = set(re.findall(r"local\s+(\w+)\s*=\s*KEYS\[", source))
        aliases |= set(re.findall(r"for\s+\w+\s*,\s*(\w+)\s+in\s+ipairs\(KEYS\)", source))
        for command, first_arg in call.findall(source):
            arg = first_arg.strip()
            if command.lower() in KEYLESS_COMMANDS or arg.startswith("KEYS[") or arg in aliases:
                continue
            offenders.append(f"{path.relative_to(REPO)}: redis.call('{command}', {arg} ...)")
    assert not offenders, "scripts touching keys not passed in KEYS:\n" + "\n".join(offenders)


def redis_backed_strategies() -> list[str]:
    return [name for name in registry.names() if name not in ("local", "zookeeper")]


@pytest.mark.parametrize("strategy", redis_backed_strategies())
def test_every_call_of_a_lock_strategy_stays_in_one_hash_slot(strategy, cluster_clients):
    from tests.lockcore.strategy_params import lock_class

    lock_class(strategy)  # a broken import fails here
    backend: Any = cluster_clients if strategy == "redlock" else cluster_clients[0]
    # multi: two unrelated resources, which a script may only lock if they share a slot.
    resource: Any = ["sku-1", "sku-2"] if strategy == "multi" else "sku-1"
    first = lockcore.create(strategy, backend, resource, ttl_ms=5_000, wait="notify")
    second = lockcore.create(strategy, backend, resource, ttl_ms=5_000, wait="notify")
    assert first.acquire(blocking=False)
    assert not second.acquire(blocking=True, timeout=0.05)  # a failed try, then a wait
    if first.expires:
        first.extend()
    first.held()
    first.release()
    assert second.acquire(blocking=True, timeout=2)
    second.release()

    calls = [keys for client in cluster_clients for keys in client.script_keys]
    crossing = [keys for client in cluster_clients for keys in client.cross_slot_calls()]
    assert not crossing, f"{strategy} script calls span hash slots: {crossing}"
    assert calls or strategy in NO_SCRIPTS, f"{strategy} made no script call at all"


#: strategies that teach with plain commands and so never call a script
NO_SCRIPTS = {"naive", "setnx", "setnx-expire", "getset"}


def webapp_paths() -> list[str]:
    from webapp import paths

    return [name for name in dict.fromkeys([*paths.names(), "atomic-sharded"])
            if name != "zookeeper"]


@pytest.mark.parametrize("strategy", webapp_paths())
def test_every_purchase_path_of_the_shop_stays_in_one_hash_slot_per_call(
        strategy, cluster_clients, tmp_path, monkeypatch):
    from webapp import locks, paths, sales
    from webapp.config import from_env
    from webapp.extensions import Backends, make_engine
    from webapp.models import Base
    from webapp.problems import SoldOut
    from webapp.services import Checkout, PurchaseRequest, checkout
    from webapp.sharding import ShardedPath

    if strategy not in paths.names():
        monkeypatch.setitem(paths._paths(), strategy, ShardedPath())
    from tests.lockcore.strategy_params import lock_class

    try:
        lock_class(strategy)  # a broken import fails here
    except ValueError:
        pass  # a lock-free path (atomic, sql, atomic-sharded)
    engine = make_engine(f"sqlite:///{tmp_path / 'shop.sqlite'}")
    Base.metadata.create_all(engine)
    backends = Backends({**from_env(str(tmp_path)), "LOCK_TTL_MS": 5_000})
    backends.__dict__.update(redis=cluster_clients[0], redlock=cluster_clients, engine=engine)
    deps = Checkout(sessions=backends.sessions, redis=cluster_clients[0], lock_timeout_s=2,
                    lock_for=lambda sale, user: locks.lock_for(backends, sale, user))
    sales.create_product(deps.sessions, "sku-1", "Phone", 100, stock=2, strategy=strategy)
    sales.reset_sale(deps.sessions, deps.redis, "sku-1", stock=2, strategy=strategy)

    for user in ("ann", "bob"):
        checkout(deps, PurchaseRequest("sku-1", user))
    with pytest.raises(SoldOut):
        checkout(deps, PurchaseRequest("sku-1", "cyd"))
    report = sales.audit(deps.sessions, deps.redis, "sku-1")
    engine.dispose()

    assert report["units_sold"] == 2 and report["remaining"] == 0
    crossing = [keys for client in cluster_clients for keys in client.cross_slot_calls()]
    assert not crossing, f"{strategy} script calls span hash slots: {crossing}"
