"""Wait for a near Redis's reply on the CPU, not asleep: adaptive spinning for lock calls.

A blocking ``recv`` puts the process to sleep until Redis answers, and waking it costs
more than the wait when Redis is near: on the 2-core VM of docs/performance.md
("Session 17") a loopback GET took 59-61 us read blocking and 22 us read by polling
(``python -m loadtest.bench.spinning``). The sleep and the wake-up were two thirds of
the round trip. A lock pays a round trip to acquire and one to release, on the
critical path of everyone waiting for it.

So a lane call (``lockcore.wire``) polls its socket with a non-blocking ``MSG_PEEK`` for
up to ``SPIN_S`` before the usual blocking read. This is the adaptive mutex's bet (glibc's
``PTHREAD_MUTEX_ADAPTIVE_NP``, Go's ``sync.Mutex`` spinning): a short wait is cheaper
on the CPU than asleep, and a long one must not burn it. So each lane keeps a moving
average of how often a spin saw its reply in time. Below ``MIN_HIT_RATE`` (a Redis
across a network, or one too busy to answer quickly) it blocks at once, and spins only
every ``PROBE_EVERY``-th call to see whether that has changed. A far Redis then costs
at most ``SPIN_S / PROBE_EVERY`` of CPU per call.

Under contention on an oversubscribed machine (the bench's eight processes on two
cores) spinning gained nothing measurable and cost up to 15% more client CPU, most
likely because the spinner keeps a core someone else could use.
``lockcore.spin.SPIN_S = 0`` turns it off.

Never spun on:

* a gevent (or other wrapped) socket: blocking there lets other greenlets run, which
  is worth more than our latency;
* a TLS socket: decrypted bytes may already wait in its buffer, invisible to a peek;
* anything but ``Lane.call`` (a BLPOP waits for a hand-off, not for Redis).
"""

from __future__ import annotations

import _socket
import ssl
import time
from typing import Any

#: longest spin before blocking: a few loopback round trips (docs/performance.md, Session 17);
#: 0 never spins
SPIN_S = 100e-6
#: below this share of spins that saw their reply, a lane blocks at once
MIN_HIT_RATE = 0.5
#: a lane that stopped spinning still spins on every this-many-th call, to notice a change
PROBE_EVERY = 64
#: weight of the latest spin in the moving average
ALPHA = 1 / 16

_PEEK = _socket.MSG_PEEK | _socket.MSG_DONTWAIT
_recv = _socket.socket.recv


class Spinner:
    """One lane's spinning: whether it pays, and the spin itself."""

    def __init__(self) -> None:
        self.hit_rate = 1.0
        self._skipped = 0

    def wait(self, connection: Any) -> None:
        """Return once ``connection`` has bytes to read, or at once if spinning does not pay."""
        if SPIN_S <= 0:
            return
        sock = getattr(connection, "_sock", None)
        # gevent's socket is no C socket (and may be what ``socket.socket`` names now)
        if not isinstance(sock, _socket.socket) or isinstance(sock, ssl.SSLSocket):
            return  # gevent, TLS, not connected: block as usual
        if self.hit_rate < MIN_HIT_RATE:
            self._skipped += 1
            if self._skipped < PROBE_EVERY:
                return
        self._skipped = 0
        hit = _spin(sock)
        self.hit_rate += ALPHA * (hit - self.hit_rate)


def readable(sock: _socket.socket) -> bool:
    """Whether ``sock`` has bytes, EOF or an error waiting: one peek that never blocks."""
    timeout = sock.gettimeout()
    if timeout:  # with a timeout, CPython polls before the recv: make it non-blocking
        sock.settimeout(0.0)
    try:
        _recv(sock, 1, _PEEK)
    except (BlockingIOError, InterruptedError):
        return False  # nothing to read yet
    except OSError:
        return True  # a reset: the read that follows raises it properly
    finally:
        if timeout:
            sock.settimeout(timeout)
    return True  # bytes, or EOF (b""): the read that follows deals with them


def _spin(sock: _socket.socket) -> bool:
    """Peek at ``sock`` until it is ``readable``: True, or ``SPIN_S`` passed: False."""
    deadline = time.perf_counter() + SPIN_S
    while not readable(sock):
        if time.perf_counter() > deadline:
            return False
    return True
