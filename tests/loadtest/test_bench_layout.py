"""The bench says whether its workers share one address layout (``pool.worker_layout``).

docs/performance.md ("Session 24") found that this, not the start method itself, moved
python-redis-lock's figures; so the premise is checked here too: two spawned workers
have libc at different addresses unless randomisation is off (``setarch -R``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from loadtest.bench.pool import worker_layout
from tests.support import missing_system_part

PROBE = """
import ctypes, json, multiprocessing as mp
from loadtest.bench.pool import worker_layout
from tests.support import missing_system_part

def where_libc_is(q):
    q.put(ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    workers = [ctx.Process(target=where_libc_is, args=(q,)) for _ in range(2)]
    for w in workers:
        w.start()
    addresses = [q.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(10)
    print(json.dumps({"addresses": addresses, "layout": worker_layout("spawn")}))
"""


def _probe(tmp_path: Path, *prefix: str) -> dict:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    done = subprocess.run([*prefix, sys.executable, str(script)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parents[2], check=True)
    return json.loads(done.stdout)


def test_forked_workers_share_their_layout() -> None:
    assert worker_layout("forkserver") == "shared"


def test_spawned_workers_share_a_layout_only_with_randomisation_off(tmp_path) -> None:
    if shutil.which("setarch") is None:
        missing_system_part("setarch (util-linux): turning address randomisation off")
    randomising = Path("/proc/sys/kernel/randomize_va_space").read_text().strip() != "0"
    plain = _probe(tmp_path)
    if randomising:
        assert plain["layout"] == "own"
        a, b = plain["addresses"]
        assert a != b, "ASLR is on, yet two spawned workers had libc at one address"
    off = _probe(tmp_path, "setarch", "-R")
    assert off["layout"] == "shared"
    a, b = off["addresses"]
    assert a == b, "under setarch -R two spawned workers still had different layouts"
