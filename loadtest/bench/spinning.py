"""What spinning for a reply saves (``lockcore.spin``), on a Redis of our own.

    python -m loadtest.bench.spinning [seconds]

Three figures, each read blocking and read by spinning, on the same server:

* a raw GET on one socket: the round trip itself, no client library;
* a lane call (``lockcore.wire``): what a lock's acquire or release costs;
* a solo ``token`` acquire+release.

The gap between the two columns is what a sleep and a wake-up cost this machine.
"""

from __future__ import annotations

import argparse
import math
import socket
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import redis

import lockcore
from lockcore import wire
from lockcore.embedded import RedisServer

from .experiments import never_spin


def _per_call_us(call: Callable[[], Any], seconds: float) -> float:
    for _ in range(200):
        call()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        done += 1
    return (time.perf_counter() - start) / done * 1e6


def _raw_get(port: int, spin: bool, closing: ExitStack) -> Callable[[], Any]:
    sock = closing.enter_context(socket.create_connection(("127.0.0.1", port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    request, flags = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", socket.MSG_DONTWAIT if spin else 0

    def get() -> bytes:
        sock.sendall(request)
        while True:
            try:
                return sock.recv(64, flags)
            except BlockingIOError:
                pass
    return get


def measure(seconds: float) -> list[tuple[str, float, float]]:
    rows = []
    server = RedisServer().start()
    try:
        with ExitStack() as closing:
            url = server.url
            _client(url, True, closing).set("k", "v")
            for what, make in [
                ("raw GET, one socket", lambda spin: _raw_get(server.port, spin, closing)),
                ("lane call (ECHO)", lambda spin: _lane_call(url, spin, closing)),
                ("token acquire+release", lambda spin: _token_cycle(url, spin, closing)),
            ]:
                blocking = _per_call_us(make(False), seconds)
                spinning = _per_call_us(make(True), seconds)
                rows.append((what, blocking, spinning))
    finally:
        server.cleanup()
    return rows


def _client(url: str, spin: bool, closing: ExitStack) -> redis.Redis:
    client = closing.enter_context(redis.Redis.from_url(url))
    return client if spin else never_spin(client)


def _lane_call(url: str, spin: bool, closing: ExitStack) -> Callable[[], Any]:
    lane = wire.lane(_client(url, spin, closing))
    assert lane is not None
    return lambda: lane.call("ECHO", "x")


def _token_cycle(url: str, spin: bool, closing: ExitStack) -> Callable[[], Any]:
    lock = lockcore.create("token", _client(url, spin, closing), "spinning", ttl_ms=10_000)

    def cycle() -> None:
        lock.acquire()
        lock.release()
    return cycle


def _seconds(text: str) -> float:
    """A measuring time: a positive number of seconds (0 or nan measured no call)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench.spinning",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("seconds", nargs="?", type=_seconds, default=2.0,
                        help="measuring time of each figure, each way (default 2)")
    seconds = parser.parse_args(argv).seconds
    print(f"{'us per call':24} {'blocking':>9} {'spinning':>9}")
    for what, blocking, spinning in measure(seconds):
        print(f"{what:24} {blocking:9.1f} {spinning:9.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
