"""Profile one contender's solo loop and say where its time goes, by package.

    python -m loadtest.bench.profiling run token-notify 6     # the loop, for py-spy
    py-spy record --format raw -o /tmp/t.raw -- python -m loadtest.bench.profiling run ...
    python -m loadtest.bench.profiling summarize /tmp/t.raw   # self time by package

The summary counts only samples inside the loop (not imports or server start-up) and
charges each sample to the package of its innermost frame: ``lockcore`` (our own
Python), ``redis-py`` (command packing, parsing, pools), ``socket`` (the send and the
recv, i.e. waiting for Redis), ``threads`` (thread-pool hand-offs), or ``other``.
"""

from __future__ import annotations

import collections
import sys
import time

LOOP_FRAME = "_loop (loadtest/bench/profiling.py"
BUCKETS = [  # first match wins, tested against the innermost frame
    ("socket", ("read_from_socket", "send_packed_command", "_socket_can_read")),
    ("threads", ("concurrent/futures", "threading.py")),
    ("lockcore", ("lockcore/",)),
    ("redis-py", ("redis/",)),
]


def _loop(handle: object, seconds: float) -> int:
    done, end = 0, time.time() + seconds
    while time.time() < end:
        handle.acquire(5.0)  # type: ignore[attr-defined]
        handle.release()  # type: ignore[attr-defined]
        done += 1
    return done


def run(name: str, seconds: float) -> None:
    from lockcore.embedded import EmbeddedRedis

    from .contenders import by_name
    from .worker import WorkerConnections

    with EmbeddedRedis(1) as one, EmbeddedRedis(5) as five:
        conns = WorkerConnections({"redis": one.urls[0], "redlock": five.urls})
        handle = by_name([name])[0].build(conns, "profile")
        done = _loop(handle, seconds)
        print(f"{name}: {done / seconds:,.0f} acquire+release per second")


def summarize(path: str) -> None:
    buckets: collections.Counter[str] = collections.Counter()
    for line in open(path, encoding="utf-8"):
        stack, _, samples = line.rstrip().rpartition(" ")
        if LOOP_FRAME in stack or "redlock_nodes.py" in stack or "_worker (concurrent" in stack:
            leaf = stack.rsplit(";", 1)[-1]
            bucket = next((b for b, marks in BUCKETS if any(m in leaf for m in marks)), "other")
            buckets[bucket] += int(samples)
    total = sum(buckets.values()) or 1
    for bucket, count in buckets.most_common():
        print(f"{bucket:10} {100 * count / total:5.1f}%")
    print(f"({total} samples in the loop)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run(sys.argv[2], float(sys.argv[3]))
    elif sys.argv[1:2] == ["summarize"]:
        summarize(sys.argv[2])
    else:
        raise SystemExit(__doc__)
