"""The quick pool check (``webapp/redisconn.py``) still sees a reply waiting on the
socket or in the parser's buffer, and in a gevent process it does not go through
gevent's ``poll``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from redis import BlockingConnectionPool, Redis

from webapp.redisconn import QuickCheckConnection, connection_options


@pytest.fixture
def quick_client(redis_url: str) -> Iterator[Redis]:
    pool = BlockingConnectionPool.from_url(redis_url, max_connections=1,
                                           **connection_options(redis_url))
    client = Redis(connection_pool=pool)
    yield client
    client.close()
    pool.disconnect()


def test_the_class_follows_the_url_scheme() -> None:
    assert connection_options("redis://127.0.0.1:6379/0") == {
        "connection_class": QuickCheckConnection}
    assert "connection_class" in connection_options("unix:///tmp/redis.sock")
    assert connection_options("rediss://example:6380/0") == {}  # TLS keeps redis-py's


def test_an_unread_reply_on_the_socket_is_seen(quick_client: Redis) -> None:
    pool = quick_client.connection_pool
    connection = pool.get_connection()
    try:
        assert connection.can_read() is False  # clean: the quick answer
        connection.send_command("ECHO", "stale")  # its reply is not read yet
        deadline = time.monotonic() + 2
        while not connection.can_read() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert connection.can_read() is True  # the reply waits in the socket
        assert connection.read_response() == b"stale"
        assert connection.can_read() is False
    finally:
        pool.release(connection)


def test_a_reply_already_buffered_by_the_parser_counts_as_readable(
        quick_client: Redis) -> None:
    pool = quick_client.connection_pool
    connection = pool.get_connection()
    try:
        connection.send_packed_command(connection.pack_commands([("ECHO", "a"),
                                                                 ("ECHO", "b")]))
        deadline = time.monotonic() + 2
        while connection.can_read() is False and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # both replies in the socket: one read buffers both
        assert connection.read_response() == b"a"
        # the socket is empty now; the second reply waits in the parser's buffer
        assert connection.can_read() is True
        assert connection.read_response() == b"b"
        assert connection.can_read() is False
    finally:
        pool.release(connection)


def test_under_gevent_the_check_is_a_system_poll_not_a_gevent_watcher(
        redis_url: str) -> None:
    script = textwrap.dedent(f"""
        from gevent import monkey; monkey.patch_all()
        import select
        from redis import BlockingConnectionPool, Redis
        from webapp.redisconn import connection_options

        def gevent_poll(*args, **kwargs):
            raise AssertionError("gevent's poll was used for the pool check")

        select.poll = gevent_poll  # what a patched module hands redis-py
        url = {redis_url!r}
        pool = BlockingConnectionPool.from_url(url, max_connections=1,
                                               **connection_options(url))
        client = Redis(connection_pool=pool)
        for _ in range(3):
            assert client.ping()
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
