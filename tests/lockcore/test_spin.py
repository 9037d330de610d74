"""Adaptive spinning (``lockcore.spin``): spin while it pays, block when it does not.

Socket pairs stand in for Redis, so whether a reply is waiting is up to the test, not
to the machine's speed; a lane on a real Redis checks that spinning leaves it in step.
"""

from __future__ import annotations

import socket
import ssl
from types import SimpleNamespace

import pytest

from lockcore import spin, wire


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_a_waiting_reply_is_seen_and_left_unread_for_the_parser(pair):
    ours, theirs = pair
    spinner = spin.Spinner()
    theirs.sendall(b"+OK\r\n")
    spinner.wait(SimpleNamespace(_sock=ours))
    assert spinner.hit_rate == 1.0
    assert ours.recv(16) == b"+OK\r\n"  # peeked, not consumed


def test_a_late_reply_costs_one_spin_then_the_read_blocks_as_usual(pair):
    ours, _ = pair
    spinner = spin.Spinner()
    spinner.wait(SimpleNamespace(_sock=ours))  # nothing comes: gives up after SPIN_S
    assert spinner.hit_rate == pytest.approx(1 - spin.ALPHA)


def test_a_lane_whose_replies_come_late_stops_spinning_and_probes_now_and_then(pair,
                                                                                monkeypatch):
    ours, _ = pair
    spinner = spin.Spinner()
    while spinner.hit_rate >= spin.MIN_HIT_RATE:
        spinner.wait(SimpleNamespace(_sock=ours))
    spins = []

    def still_late(sock):
        spins.append(sock)
        return False

    monkeypatch.setattr(spin, "_spin", still_late)
    for _ in range(spin.PROBE_EVERY * 3):
        spinner.wait(SimpleNamespace(_sock=ours))
    assert len(spins) == 3  # one probe per PROBE_EVERY calls, not one per call


def test_a_lane_whose_replies_come_back_in_time_spins_again(pair, monkeypatch):
    ours, _ = pair
    spinner = spin.Spinner()
    spinner.hit_rate = 0.0
    monkeypatch.setattr(spin, "_spin", lambda sock: True)  # Redis became near again
    for _ in range(spin.PROBE_EVERY * 20):
        spinner.wait(SimpleNamespace(_sock=ours))
        if spinner.hit_rate >= spin.MIN_HIT_RATE:
            break
    assert spinner.hit_rate >= spin.MIN_HIT_RATE


def test_spinning_is_off_when_its_budget_is_zero(pair, monkeypatch):
    spins = []
    monkeypatch.setattr(spin, "_spin", lambda sock: spins.append(sock) or True)
    monkeypatch.setattr(spin, "SPIN_S", 0)
    spin.Spinner().wait(SimpleNamespace(_sock=pair[0]))
    assert spins == []


def test_a_socket_timeout_is_kept(pair):
    ours, _ = pair
    ours.settimeout(0.25)
    spin.Spinner().wait(SimpleNamespace(_sock=ours))
    assert ours.gettimeout() == 0.25


def test_a_closed_peer_ends_the_spin_at_once_for_the_read_to_report(pair):
    ours, theirs = pair
    theirs.close()
    spinner = spin.Spinner()
    spinner.wait(SimpleNamespace(_sock=ours))
    assert spinner.hit_rate == 1.0


def _gevent_socket(pair):
    gevent_socket = pytest.importorskip("gevent.socket")
    return gevent_socket.socket(fileno=pair[0].detach())


def _tls_socket(pair):
    return ssl.create_default_context().wrap_socket(pair[0], server_hostname="localhost",
                                                    do_handshake_on_connect=False)


@pytest.mark.parametrize("make", [lambda pair: None, _gevent_socket, _tls_socket],
                         ids=["unconnected", "gevent", "tls"])
def test_an_unconnected_gevent_or_tls_socket_is_never_spun_on(pair, make, monkeypatch):
    spins = []
    monkeypatch.setattr(spin, "_spin", lambda s: spins.append(s) or True)
    pair[1].sendall(b"+OK\r\n")
    sock = make(pair)
    try:
        spin.Spinner().wait(SimpleNamespace(_sock=sock))
    finally:
        if sock is not None:
            sock.close()
    assert spins == []


def test_a_lane_call_spins_and_stays_in_step_with_redis(redis_client, monkeypatch):
    lane = wire.lane(redis_client)
    seen = []
    real = spin._spin
    monkeypatch.setattr(spin, "_spin", lambda sock: seen.append(real(sock)) or seen[-1])
    # spin on every call, hits or not: on a busy machine eleven replies slower than
    # SPIN_S in a row made the lane stop spinning (as it should), and this test fail
    monkeypatch.setattr(spin, "MIN_HIT_RATE", 0.0)
    for n in range(50):
        assert lane.call("ECHO", str(n)) == str(n).encode()
    assert len(seen) == 50  # every call spun (hit or not, the replies stayed in order)
