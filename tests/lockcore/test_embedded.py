"""Embedded redis-server processes: started on free loopback ports, stopped by pid."""

from __future__ import annotations

import pytest
import redis

from lockcore.embedded import (
    MIN_VERSION,
    EmbeddedRedis,
    RedisServer,
    _version,
    find_redis_server,
    free_port,
    free_ports,
    ping,
    serving_pid,
)
from tests.support import pid_alive

pytestmark = pytest.mark.timeout(60)


# stop() and kill() reap the child, so no zombie answers here
alive = pid_alive


def test_found_binary_is_at_least_redis_6_2():
    assert _version(find_redis_server()) >= MIN_VERSION


def test_free_port_is_never_the_shared_6379():
    assert free_port() != 6379


def test_server_starts_answers_and_is_stopped_by_pid():
    server = RedisServer().start()
    pid = server.pid
    try:
        assert server.port != 6379
        assert ping(server.port)
        assert redis.Redis.from_url(server.url).set("k", "v")
    finally:
        server.cleanup()
    assert not alive(pid)
    assert not ping(server.port)


def test_paused_server_does_not_answer_until_resumed():
    with EmbeddedRedis(1) as cluster:
        server = cluster.servers[0]
        server.pause()
        assert not ping(server.port, timeout=0.2)
        server.resume()
        assert ping(server.port)


def test_killed_server_restarts_empty_on_the_same_port():
    with EmbeddedRedis(1) as cluster:
        server = cluster.servers[0]
        client = redis.Redis.from_url(server.url)
        client.set("lock:{x}", "held")
        old_pid = server.pid
        server.kill()
        assert not alive(old_pid)
        server.start()
        assert server.pid != old_pid
        assert client.get("lock:{x}") is None  # no persistence: the RedLock restart lesson
        client.close()


def test_embedded_redis_stops_every_server_on_exit():
    with EmbeddedRedis(3) as cluster:
        pids = [s.pid for s in cluster.servers]
        assert len(set(cluster.urls)) == 3
        assert all(ping(s.port) for s in cluster.servers)
    assert not any(alive(pid) for pid in pids)


def test_embedded_redis_needs_at_least_one_node():
    with pytest.raises(ValueError):
        EmbeddedRedis(0)


def test_free_ports_are_distinct():
    ports = free_ports(50)
    assert len(set(ports)) == 50


def test_a_server_told_to_use_a_taken_port_fails_instead_of_borrowing_the_other():
    # CI once started five RedLock "nodes" on one port: the PONG of the first server
    # answered for the four that had exited with "Address already in use"
    with EmbeddedRedis(1) as cluster:
        held = cluster.servers[0]
        assert serving_pid(held.port) == held.pid
        second = RedisServer(port=held.port)
        try:
            with pytest.raises(RuntimeError, match="taken"):
                second.start()
        finally:
            second.cleanup()
        assert serving_pid(held.port) == held.pid


def test_a_picked_port_taken_before_start_is_swapped_for_a_free_one():
    with EmbeddedRedis(1) as cluster:
        server = RedisServer()
        server.port = cluster.servers[0].port  # someone took our pick meanwhile
        try:
            server.start()
            assert server.port != cluster.servers[0].port
            assert serving_pid(server.port) == server.pid
        finally:
            server.cleanup()


def test_each_servers_data_dir_is_named_after_the_port_it_serves_on():
    # EmbeddedRedis gave its servers distinct ports after their dirs were named after
    # others: a server's log looked for by its port was not found (a CLI audit)
    with EmbeddedRedis(3) as cluster:
        for server in cluster.servers:
            assert server.workdir.name.startswith(f"seckill-redis-{server.port}-"), \
                (server.port, server.workdir)
            assert serving_pid(server.port) == server.pid


def test_a_server_whose_picked_port_was_taken_moves_with_its_data_dir():
    import socket

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    server = RedisServer(taken, may_move=True)
    try:
        server.start()
        assert server.port != taken
        assert server.workdir.name.startswith(f"seckill-redis-{server.port}-")
        assert server.logfile.exists()
    finally:
        server.cleanup()
        squatter.close()


def test_cleanup_signals_no_pid_it_already_reaped(monkeypatch):
    # serve's check for a Redis that exited (poll()) reaped the dead server; at Ctrl-C
    # cleanup() still sent SIGCONT and SIGTERM to its pid, by then maybe another
    # process's
    import os
    import signal

    server = RedisServer().start()
    try:
        assert server.proc is not None
        pid = server.proc.pid
        os.kill(pid, signal.SIGKILL)
        server.proc.wait(timeout=10)  # reaped, as poll() does once it has exited
        sent: list[tuple[int, int]] = []
        real_kill = os.kill

        def spy(target: int, sig: int) -> None:
            sent.append((target, sig))
            real_kill(target, sig)

        monkeypatch.setattr(os, "kill", spy)
        server.cleanup()
        assert [s for s in sent if s[0] == pid] == []
    finally:
        server.cleanup()
