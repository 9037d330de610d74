"""A test run stopped by SIGTERM (``timeout``, ``kill``, a CI runner) stops the servers
its tests started (tests/conftest.py turns SIGTERM into Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HANGING_TEST = '''
import os, time

def test_hangs_holding_a_server(redis_server):
    with open(os.environ["PID_FILE"] + ".tmp", "w") as out:
        out.write(str(redis_server.proc.pid))
    os.rename(os.environ["PID_FILE"] + ".tmp", os.environ["PID_FILE"])
    time.sleep(120)
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone but for its reaping
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_sigterm_to_pytest_stops_the_redis_server_a_fixture_started(tmp_path):
    (tmp_path / "test_hanging.py").write_text(HANGING_TEST)
    pid_file, output = tmp_path / "server.pid", tmp_path / "pytest.out"
    with open(output, "wb") as out:
        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-p", "tests.conftest", "--rootdir", str(tmp_path),
             str(tmp_path / "test_hanging.py")],
            cwd=ROOT, env={**os.environ, "PID_FILE": str(pid_file)},
            stdout=out, stderr=subprocess.STDOUT)
    server = None
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists():
            assert run.poll() is None, output.read_text()[-2000:]
            assert time.monotonic() < deadline, "the hanging test never started"
            time.sleep(0.05)
        server = int(pid_file.read_text())
        assert _alive(server)
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(server), "SIGTERM left the test's redis-server running"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if server is not None and _alive(server):
            os.kill(server, signal.SIGKILL)
