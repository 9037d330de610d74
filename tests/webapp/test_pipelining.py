"""Auto-pipelining (``pipelining.py``): concurrent purchase scripts share a round trip,
and each caller still gets its own reply or its own error."""

from __future__ import annotations

import socket

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.retry import Retry

from tests.webapp.heldbatch import run_behind_a_held_batch
from webapp import sales, scripts
from webapp.keys import SaleKeys
from webapp.pipelining import ScriptPipeline

SKU = "sku-1"
KEYS = SaleKeys(SKU)
SCRIPT_KEYS = [KEYS.soldout, KEYS.buyers, KEYS.info, KEYS.stock]


@pytest.fixture
def atomic_sale(sessions, redis_client) -> None:
    sales.create_product(sessions, SKU, "Keyboard", 4_900, stock=20, strategy="atomic")
    sales.reset_sale(sessions, redis_client, SKU, stock=20, strategy="atomic")


def run_concurrently(monkeypatch, pipeline: ScriptPipeline,
                     calls: dict[str, list]) -> dict[str, object]:
    """One thread per call; the first batch waits until every other call has queued."""
    return run_behind_a_held_batch(
        monkeypatch, pipeline, "_round_trip",
        lambda user: pipeline.run("atomic_checkout", SCRIPT_KEYS, calls[user]), list(calls))


def test_concurrent_scripts_share_one_round_trip_and_each_gets_its_own_reply(
        atomic_sale, redis_client, monkeypatch):
    pipeline = ScriptPipeline(redis_client)
    users = [f"user-{n}" for n in range(30)]
    answers = run_concurrently(monkeypatch, pipeline, {user: [user, 1] for user in users})
    assert (pipeline.batches, pipeline.items) == (2, 30)  # the first alone, then 29 at once
    codes = {user: answer[0] for user, answer in answers.items()}  # type: ignore[index]
    winners = {user for user, code in codes.items() if code == 1}
    assert len(winners) == 20 and set(codes.values()) == {1, -1}
    # each reply is its own caller's: exactly the winners are reserved
    assert {member.decode() for member in redis_client.smembers(KEYS.buyers)} == winners
    assert int(redis_client.get(KEYS.stock)) == 0


def test_a_failing_script_fails_only_its_own_caller(atomic_sale, redis_client, monkeypatch):
    pipeline = ScriptPipeline(redis_client)
    calls = {"user-0": ["user-0", 1], "bad": ["bad", "not-a-number"], "user-2": ["user-2", 1]}
    answers = run_concurrently(monkeypatch, pipeline, calls)
    assert isinstance(answers["bad"], ResponseError)
    assert answers["user-0"][0] == answers["user-2"][0] == 1  # type: ignore[index]
    assert redis_client.ping()  # the connection went back to the pool in step


def test_a_flushed_script_cache_is_reloaded(atomic_sale, redis_client):
    pipeline = ScriptPipeline(redis_client)
    assert pipeline.run("atomic_checkout", SCRIPT_KEYS, ["user-0", 1])[0] == 1
    redis_client.script_flush()  # our own server: as after a Redis restart
    assert pipeline.run("atomic_checkout", SCRIPT_KEYS, ["user-1", 1])[0] == 1
    assert int(redis_client.get(KEYS.stock)) == 18


def test_redis_down_fails_every_caller_with_an_error_of_its_own(monkeypatch):
    with socket.socket() as probe:  # a free port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    pipeline = ScriptPipeline(client)
    answers = run_concurrently(monkeypatch, pipeline,
                               {f"user-{n}": [f"user-{n}", 1] for n in range(5)})
    assert all(isinstance(error, RedisConnectionError) for error in answers.values())
    assert len({id(error) for error in answers.values()}) == 5
    assert pipeline._serving is False  # the lead was passed on and dropped, not lost


@pytest.mark.parametrize("args", [["user-0", 1], ["ü é ☃", 2], [b"\x00\r\n", -3],
                                  ["", 1.5], ["x" * 70_000, 10**20]])
def test_a_script_is_packed_as_redis_py_packs_it(redis_client, args):
    pipeline = ScriptPipeline(redis_client)
    connection = redis_client.connection_pool.make_connection()
    sha = scripts.script(redis_client, "atomic_checkout").sha
    other_keys = SaleKeys("sku-2")
    for keys in (SCRIPT_KEYS, [other_keys.soldout, other_keys.buyers], SCRIPT_KEYS):
        theirs = b"".join(connection.pack_commands([("EVALSHA", sha, len(keys), *keys, *args)]))
        assert pipeline._packed("atomic_checkout", keys, args) == theirs  # made, or reused
