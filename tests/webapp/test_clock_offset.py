"""A web host whose clock is off from its Redis server's (``webapp/deadlines.py``).

A purchase script carries a deadline stamped from the host's clock and checked against
Redis's ``TIME``. A host 15 s behind had every purchase answer "Redis answered too
late" while ``/healthz`` said ok; a host ahead had no deadline at all (a clock audit,
under ``faketime``). ``ClockWatch`` measures the offset and the deadline follows
Redis's clock. The host's clock is skewed here by giving ``deadlines`` a ``time``
module of its own; the scripts run in a real redis-server.
"""

from __future__ import annotations

import logging
import time
import types

import pytest
import redis

from webapp import deadlines
from webapp.deadlines import MARGIN_S, ClockWatch, deadline, reserve
from webapp.problems import Busy

TIMEOUT_S = 10


def skew(monkeypatch: pytest.MonkeyPatch, by_s: float) -> None:
    """This host's wall clock, as ``deadlines`` reads it, ``by_s`` ahead (< 0: behind)."""
    real = time.time
    monkeypatch.setattr(deadlines, "time", types.SimpleNamespace(
        time=lambda: real() + by_s, monotonic=time.monotonic))


@pytest.fixture
def clients(redis_url):
    client = redis.Redis.from_url(redis_url, socket_timeout=TIMEOUT_S)
    probe = redis.Redis.from_url(redis_url, socket_timeout=1)
    yield client, probe
    client.close()
    probe.close()


def redis_now_ms(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds * 1000 + micros / 1000


def test_a_host_behind_its_redis_is_late_for_every_script_until_its_clock_is_measured(
        clients, monkeypatch, caplog):
    client, probe = clients
    skew(monkeypatch, -15)
    with pytest.raises(Busy, match="too late"):  # the failure: nothing can be bought
        reserve(client, "clock:buyers", "ann")
    with caplog.at_level(logging.WARNING, logger="webapp.deadlines"):
        ClockWatch(probe, client.connection_pool)()
    assert reserve(client, "clock:buyers", "ann") is True
    assert any("15.0" in r.getMessage() and "behind" in r.getMessage()
               for r in caplog.records), caplog.text


def test_a_host_ahead_of_its_redis_stamps_deadlines_in_redis_s_clock(clients, monkeypatch):
    client, probe = clients
    skew(monkeypatch, 15)
    expected = (TIMEOUT_S - MARGIN_S) * 1000
    unmeasured = int(deadline(client)) - redis_now_ms(client)
    assert unmeasured > expected + 10_000  # the failure: a late script would still run
    ClockWatch(probe, client.connection_pool)()
    measured = int(deadline(client)) - redis_now_ms(client)
    assert expected - 500 < measured <= expected + 50, measured


def test_a_step_of_the_host_s_wall_clock_after_the_measurement_moves_no_deadline(
        clients, monkeypatch):
    # the offset is to the monotonic clock: NTP stepping the host back 15 s (a host that
    # was ahead) made every purchase "too late" until the next measurement (a review)
    client, probe = clients
    skew(monkeypatch, 15)
    ClockWatch(probe, client.connection_pool)()
    skew(monkeypatch, 0)  # stepped back into line
    measured = int(deadline(client)) - redis_now_ms(client)
    expected = (TIMEOUT_S - MARGIN_S) * 1000
    assert expected - 500 < measured <= expected + 50, measured
    assert reserve(client, "clock:buyers", "cy") is True


def test_a_slow_sample_leaves_the_offset_as_it_was(clients, monkeypatch):
    client, probe = clients
    watch = ClockWatch(probe, client.connection_pool)
    watch()
    offset = client.connection_pool.seckill_clock_offset_s

    class SlowProbe:
        def ping(self) -> bool:
            return True

        def time(self) -> tuple[int, int]:
            answer = probe.time()
            time.sleep(deadlines.CLOCK_SAMPLE_S * 2)  # Redis's clock read somewhere in it
            return answer

    fresh = ClockWatch(SlowProbe(), client.connection_pool)
    fresh()
    assert client.connection_pool.seckill_clock_offset_s == offset
    assert fresh.checked_at < 0  # not counted as measured: tried again at the next look
