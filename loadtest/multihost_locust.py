"""Locust in distributed mode as subprocesses: one master, one worker per target host.

Each worker gets ``SECKILL_TARGETS=<its host>`` in its environment, so worker ``k``
buys only from host ``k`` (``multihost_users.py``) and its buyers' ids carry its pid:
the arrival log then tells which host served which order. Master and workers talk
over a free loopback port, never Locust's default 5557 that another run may hold.
Every process is started in its own session and stopped by pid.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lockcore.embedded import free_port
from lockcore.lifeline import tied_to_parent

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent


class LocustCluster:
    def __init__(self, locustfiles: list[str], targets: list[str], *, users: int,
                 run_time_s: int, workdir: Path, options: dict[str, str] | None = None,
                 start_delay_s: float = 6.0) -> None:
        self.locustfile = ",".join(str(HERE / f) for f in locustfiles)
        self.targets, self.users, self.run_time_s = targets, users, run_time_s
        self.workdir, self.options = workdir, dict(options or {})
        self.start_delay_s = start_delay_s
        self.worker_pids: list[int] = []

    def _spawn(self, args: list[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
        with open(self.workdir / log, "ab") as out:
            # tied: a run killed with SIGKILL leaves no Locust selling on its own
            command = [sys.executable, "-m", "locust", "-f", self.locustfile, *args]
            return subprocess.Popen(tied_to_parent(command), env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=self.workdir, start_new_session=True)

    def run(self) -> int:
        """Run the load once; the master's exit code (1 when Locust saw failures)."""
        port = free_port()
        # buyers on both workers fire at one wall-clock instant (the spike barrier)
        start_at = time.time() + self.start_delay_s
        options = [arg for pair in self.options.items() for arg in pair]
        base_env = {**os.environ, "SECKILL_TAIL": "4"}  # above the 3 s worker report
        master = self._spawn(
            ["--master", "--headless", "--master-bind-host", "127.0.0.1",
             "--master-bind-port", str(port), "--expect-workers", str(len(self.targets)),
             "--expect-workers-max-wait", "60", "--host", self.targets[0],
             "-u", str(self.users), "-r", str(self.users),
             # the cap counts from the buyers' start: a --run-time under the delay ended
             # the test before any buyer was let go, and the run "passed" with 0 sold
             "-t", f"{self.run_time_s + math.ceil(self.start_delay_s)}s",
             "--seckill-start-at", f"{start_at:.3f}", "--csv", str(self.workdir / "run"),
             "--loglevel", "WARNING", *options], base_env, "master.log")
        workers = [self._spawn(["--worker", "--master-host", "127.0.0.1", "--master-port",
                                str(port), "--loglevel", "WARNING"],
                               {**base_env, "SECKILL_TARGETS": target}, f"worker{k}.log")
                   for k, target in enumerate(self.targets)]
        self.worker_pids = [w.pid for w in workers]
        try:
            code = master.wait(timeout=self.run_time_s + self.start_delay_s + 90)
            for worker in workers:
                worker.wait(timeout=30)
            return code
        finally:
            for proc in (master, *workers):
                stop_locust(proc)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                         for p in sorted(self.workdir.glob("*.log")))


def stop_locust(proc: subprocess.Popen[bytes]) -> None:
    """Stop a Locust process by pid and wait for it: SIGTERM (it quits cleanly), then
    SIGKILL."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
