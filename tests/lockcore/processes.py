"""Start ``holders.py`` subprocesses and always clean them up by pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class Holder:
    """One ``holders.py`` process: send it lines, read its JSON reports, signal it."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.lockcore.holders", json.dumps(spec)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"holder {self.pid} exited with {self.proc.wait(10)}")
        report: dict[str, Any] = json.loads(line)
        return report

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)  # a stopped process must not stay stopped
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@contextmanager
def holders(*specs: dict[str, Any]) -> Iterator[list[Holder]]:
    """Start one holder per spec; SIGKILL and reap every one of them on the way out."""
    started: list[Holder] = []
    try:
        for spec in specs:
            started.append(Holder(spec))
        yield started
    finally:
        for holder in started:
            holder.kill()
