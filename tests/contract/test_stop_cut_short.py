"""A Ctrl-C that lands while a server is being stopped leaves nothing behind: the exit
hook stops what is still running and removes the scratch dirs we made.

Each case runs in a child Python with its own ``TMPDIR``, makes the stop raise
``KeyboardInterrupt`` part-way (as a second Ctrl-C would), and exits; the test then
finds that folder empty and every server pid gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import missing_system_part, pid_alive

pytestmark = pytest.mark.timeout(120)

REDIS = """
    import lockcore.embedded as embedded
    cluster = embedded.EmbeddedRedis(3).start()
    print(json.dumps([s.pid for s in cluster.servers]), flush=True)
    real = embedded._stop_process
    def cut(proc):  # the first server stops, then Ctrl-C
        real(proc)
        raise KeyboardInterrupt
    embedded._stop_process = cut
    try:
        cluster.stop()
    except KeyboardInterrupt:
        pass
    embedded._stop_process = real
"""

ZOOKEEPER = """
    import lockcore.zkserver as zkserver
    try:
        server = zkserver.ZooKeeperServer().start()
    except zkserver.ZooKeeperUnavailable as exc:
        print(json.dumps({"missing": str(exc)}), flush=True)
        raise SystemExit(0)
    print(json.dumps([server.proc.pid]), flush=True)
    real = zkserver._stop_process
    def cut(proc):  # the JVM stops, then Ctrl-C before its data dir goes
        real(proc)
        raise KeyboardInterrupt
    zkserver._stop_process = cut
    try:
        server.stop()
    except KeyboardInterrupt:
        pass
    zkserver._stop_process = real
"""

SERVED = """
    from webapp.served import ServedApp
    app = ServedApp(workers=1).start()
    import lockcore.embedded as embedded
    print(json.dumps([app.pid, *embedded._live]), flush=True)
    def cut():  # gunicorn stopped, then Ctrl-C before its Redis servers and scratch dir
        raise KeyboardInterrupt
    real, app._stack.close = app._stack.close, cut
    try:
        app.stop()
    except KeyboardInterrupt:
        pass
    app._stack.close = real
"""


@pytest.mark.parametrize("script", [REDIS, ZOOKEEPER, SERVED], ids=["redis", "zookeeper",
                                                                      "served"])
def test_a_stop_cut_short_by_ctrl_c_still_leaves_nothing(tmp_path: Path, script: str) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    child = subprocess.run([sys.executable, "-c", "import json\n" + textwrap.dedent(script)],
                           env={**os.environ, "TMPDIR": str(scratch)}, capture_output=True,
                           text=True, timeout=100)
    assert child.returncode == 0, child.stderr[-2000:]
    started = json.loads(child.stdout.splitlines()[0])
    if isinstance(started, dict):
        missing_system_part(started["missing"])
    assert started and not [pid for pid in started if pid_alive(pid)]
    assert sorted(p.name for p in scratch.iterdir()) == []
