"""``python -m loadtest.multihost`` as a user runs it: options checked before anything
starts, a run that proved nothing is a failure, errors are one line, and SIGTERM stops
what the run started (a multi-host audit found each of these the other way)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from loadtest import multihost
from loadtest.multihost import HostRun
from loadtest.multihost_locust import LocustCluster
from lockcore.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]


def audit(sold: int, stock: int = 10, consistent: bool = True) -> dict:
    return {"initial_stock": stock, "units_sold": sold, "remaining": stock - sold,
            "oversold": max(0, sold - stock), "consistent": consistent, "orders": sold}


@pytest.mark.parametrize("argv, named", [
    (["--users", "0"], "--users"),
    (["--users", "-3"], "--users"),
    (["--stock", "-5"], "--stock"),
    (["--run-time", "-1"], "--run-time"),
    (["--strategies", "token,bogus"], "bogus"),
    (["--strategies", ""], "--strategies"),
])
def test_bad_options_are_usage_errors_before_anything_starts(monkeypatch, capsys, argv, named):
    def must_not_start(*args, **kwargs):
        raise AssertionError("started the hosts for a bad option")

    monkeypatch.setattr(multihost, "two_hosts", must_not_start)
    with pytest.raises(SystemExit) as exited:
        multihost.main(argv)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_a_run_that_sold_nothing_fails():
    # a --run-time under Locust's start delay let no buyer go: "exact: True", exit 0
    run = HostRun("atomic", [audit(0), audit(0)], {}, Counter(), 0)
    assert run.exact
    assert any("nothing sold" in p for p in run.problems(safe=True))
    assert any("nothing sold" in p for p in run.problems(safe=False))


def test_a_safe_run_with_wrong_answers_or_unbalanced_books_fails():
    assert run_problems(audit(10), exit_code=1) == ["Locust counted wrong answers"]
    assert run_problems(audit(11, consistent=False)) == ["the books do not balance"]
    assert run_problems(audit(10), audit(9)) == ["the hosts' audits differ"]
    assert run_problems(audit(10)) == []


def test_buyers_told_of_orders_the_database_does_not_hold_fail_a_safe_run():
    """The showdown counts a lost order (a 201 the audit has no row for, ``phase.py``);
    the two-host run counted the 201s by host and never compared them: 34 buyers told
    "201" beside 30 rows printed "hosts agree and exact: True" and exited 0 (an audit)."""
    books = audit(30, stock=30)
    run = HostRun("atomic-sharded", [books, books], {"A": 18, "B": 16}, Counter(order=34), 0)
    assert run.exact  # the audit alone cannot see it
    assert run.problems(safe=True) == [
        "4 buyer(s) told of an order the database does not hold (34 told, 30 rows)"]
    fewer = HostRun("atomic", [books, books], {"A": 15, "B": 14}, Counter(order=29), 0)
    assert fewer.problems(safe=True) == []  # a 201 lost on the way back is not a lost order


def test_an_unsafe_strategy_overselling_is_what_it_teaches():
    run = HostRun("naive", [audit(13, consistent=False)] * 2, {"A": 13},
                  Counter(order=13, oversold=3), 1)
    assert run.problems(safe=False) == []


def run_problems(*audits: dict, exit_code: int = 0) -> list[str]:
    audits = audits if len(audits) > 1 else audits * 2
    run = HostRun("token", list(audits), {"A": 5}, Counter(order=5), exit_code)
    return [p.split(" (")[0].split(":")[0] for p in run.problems(safe=True)]


def test_the_run_time_counts_from_the_buyers_start(tmp_path, monkeypatch):
    """Locust's -t starts with the master; the buyers wait start_delay_s for the spike."""
    spawned: list[list[str]] = []

    class Done:
        pid = 1

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0

    def spawn(self, args, env, log):
        spawned.append(args)
        return Done()

    monkeypatch.setattr(LocustCluster, "_spawn", spawn)
    LocustCluster(["shapes.py"], ["http://127.0.0.1:1"], users=5, run_time_s=2,
                  workdir=tmp_path, start_delay_s=6.0).run()
    master = spawned[0]
    assert master[master.index("-t") + 1] == "8s"


def test_no_postgresql_is_one_error_line(monkeypatch, capsys):
    monkeypatch.setenv("SECKILL_PG_ADMIN_URL", f"postgresql://127.0.0.1:{free_port()}/test")
    assert multihost.main(["--users", "5", "--stock", "1", "--strategies", "atomic"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"^error: cannot connect to PostgreSQL", err, re.M), err
    assert "Traceback" not in err


def descendants(pid: int) -> set[int]:
    """Every living process below ``pid`` (children of children too)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.add(pid)
    return living


@pytest.mark.postgres
@pytest.mark.timeout(180)
def test_sigterm_stops_the_hosts_locust_and_the_database():
    started: set[int] = set()
    psycopg = pytest.importorskip("psycopg")
    from loadtest.multihost_db import admin_url
    try:
        psycopg.connect(admin_url(), connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        from tests.support import missing_system_part
        missing_system_part(f"PostgreSQL for the multi-host run: {exc}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadtest.multihost", "--users", "20", "--stock", "5",
         "--strategies", "token", "--run-time", "60"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workdir, lines = None, []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            found = re.search(r"work dir \(.*\): (\S+)", line)
            workdir = found.group(1) if found else workdir
            if line.startswith("hosts: "):
                break
        assert workdir, "".join(lines)
        deadline = time.monotonic() + 30
        while not Path(workdir, "master.log").exists():  # Locust is up, before the spike
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.2)
        time.sleep(1)
        started = descendants(proc.pid)  # the hosts, their Redis, Locust and its workers
        assert len(started) >= 5, started
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        lines.append(out)
        assert proc.returncode == 130, "".join(lines)
        time.sleep(0.5)
        assert alive(started) == set(), f"outlived the run: {alive(started)}"
        with psycopg.connect(admin_url(), autocommit=True) as admin:
            left = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                 (f"seckill_mh_{proc.pid}_%",)).fetchall()
        assert left == [], f"the run's database was left: {left}"
        assert not Path(workdir).exists()
    finally:
        leftovers = alive(started)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in leftovers:  # what a broken run left behind
            os.kill(pid, signal.SIGKILL)
