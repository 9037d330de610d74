"""A phase whose Locust did not finish, or whose arrival log is short, is an ERROR.

The showdown judges a phase from what Locust leaves behind. Its stats CSV is written
every second, its arrival log only when the run stops: a Locust that died mid-phase
(SIGKILL by the OOM killer, a listener raising: exit 2) left a stats file and no arrival
log, which read as nobody told anything. No buyer told 201 meant no order lost, and the
phase said ``ok``, exit 0 (a showdown audit). Here the real Locust runs against the stub
shop, and is killed, made to exit 2, or has its log cut short after the fact.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from loadtest import locust_csv, phase
from loadtest.verdict import PURCHASE_NAME
from tests.loadtest.stubshop import StubShop, serve
from webapp.cli import main

pytestmark = pytest.mark.timeout(180)

real_run_locust = phase.run_locust


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def killed_once_purchases_are_counted(command, log_path, timeout):
    """Locust SIGKILLed mid-sale, once its stats CSV shows purchases (as an OOM kill
    would leave it: stats on disk, no arrival log)."""
    prefix = _option(command, "--csv")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                row = locust_csv.read_stats(prefix).get(PURCHASE_NAME)
            except (KeyError, ValueError):  # a CSV caught mid-write
                row = None
            if row is not None and row.requests > 0:
                break
            time.sleep(0.2)
        else:
            pytest.fail("Locust's stats never showed a purchase")
    finally:
        proc.kill()
    return proc.wait(timeout=10)


def arrival_log_a_directory(command, log_path, timeout):
    """The arrival log's path is a directory: Locust's test_stop listener raises on it,
    which Locust logs and answers with exit code 2."""
    Path(_option(command, "--seckill-arrivals")).mkdir()
    return real_run_locust(command, log_path, timeout)


def last_line_lost(command, log_path, timeout):
    """Locust finishes normally; its arrival log then lacks its last line."""
    code = real_run_locust(command, log_path, timeout)
    log = Path(_option(command, "--seckill-arrivals"))
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:-1]))
    return code


@pytest.mark.parametrize("broken, users, stock, why", [
    (killed_once_purchases_are_counted, 60, 50, "Locust was killed by SIGKILL"),
    (arrival_log_a_directory, 10, 5, "Locust exited with code 2"),
    (last_line_lost, 10, 5, "the arrival log has "),
], ids=["sigkill", "exit-2", "short-log"])
def test_a_phase_without_all_of_locusts_evidence_is_an_error_and_the_showdown_fails(
        tmp_path, monkeypatch, capsys, caplog, broken, users, stock, why):
    monkeypatch.setattr(phase, "run_locust", broken)
    monkeypatch.setenv("LOCK_TIMEOUT_S", "1")  # the drain after a cut-short run: 2 s
    shop = StubShop(section_s=0.3 if broken is killed_once_purchases_are_counted else 0.0)
    with serve(shop) as url:
        code = main(["showdown", "--url", url, "--admin-token", "t", "--users", str(users),
                     "--stock", str(stock), "--strategies", "token",
                     "--json", str(tmp_path / "out.json")])
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "out.json").read_text())["results"][0]
    assert result["verdict"] == "ERROR" and why in result["error"], result
    assert code == 1 and f"FAILED: token: phase broke: {why}" in out, out[-2000:]
    failed = [r for r in caplog.records if "phase token failed" in r.getMessage()]
    assert failed and all(r.exc_info is None for r in failed)  # one line, no traceback
