"""``seckill showdown`` as a user scripts it (found by the contract sweep).

* An unwritable ``--report`` directory (or ``--json`` file) was found only after every
  phase had run, and ended the run in a ``FileNotFoundError`` traceback: now a usage
  error before anything starts.
* A showdown stopped with SIGTERM (``timeout``, ``kill``, a CI job's cancel) left the
  shop it served running with no parent: gunicorn, six redis-servers and, for
  ``zookeeper``, a JVM. SIGTERM now unwinds like Ctrl-C.
* It also left Locust running, which wrote its CSVs into the showdown's scratch dir while
  that was being removed, so the dir stayed behind in /tmp: Locust is now stopped first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.contract.test_cli import SECKILL, parse, seckill


def test_an_unwritable_report_dir_is_a_usage_error_before_the_run():
    started = time.monotonic()
    done = seckill("showdown", "--report", "/proc/no-such-dir/report", "--users", "1",
                   "--strategies", "token", timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "--report" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "serving the shop" not in done.stdout
    assert time.monotonic() - started < 30


def test_an_unwritable_json_file_is_a_usage_error_before_the_run():
    done = seckill("showdown", "--json", "/proc/no-such-dir/out.json", "--users", "1",
                   "--strategies", "token", timeout=60)
    assert done.returncode == 2 and "--json" in done.stderr, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr


def test_a_json_file_in_a_new_folder_is_taken_and_its_check_leaves_no_folder(tmp_path):
    # --report and bench's --json made missing folders; showdown's --json refused one.
    # The check leaves none behind (a run refused after it left an empty one: a
    # showdown audit); the run makes it when it writes
    from loadtest.showdown import _unwritable
    target = tmp_path / "new" / "deeper" / "out.json"
    assert _unwritable(None, str(target)) is None
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("command", ["showdown", "bench"])
def test_a_json_file_under_a_file_is_not_a_directory_not_file_exists(tmp_path, command):
    (tmp_path / "afile").touch()
    done = seckill(command, "--json", str(tmp_path / "afile" / "x.json"), timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "afile is not a directory" in done.stderr and "File exists" not in done.stderr


def test_a_showdown_usage_error_makes_no_report_folder(tmp_path):
    done = seckill("showdown", "--report", str(tmp_path / "new"), "--rounds", "2", timeout=60)
    assert done.returncode == 2 and "--rounds" in done.stderr, (done.stdout, done.stderr)
    assert not (tmp_path / "new").exists()


def test_a_json_file_that_is_a_directory_is_a_usage_error_before_the_run(tmp_path):
    # it was an IsADirectoryError traceback after the whole run, exit 1
    done = seckill("showdown", "--json", str(tmp_path), "--users", "1",
                   "--strategies", "token", timeout=60)
    assert done.returncode == 2 and "is a directory" in done.stderr, (done.stdout, done.stderr)
    assert "serving the shop" not in done.stdout and "Traceback" not in done.stderr


def _children() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    return parents


def _descendants(root: int) -> set[int]:
    parents, found, frontier = _children(), set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.parametrize("names", ["", ",,", " , "])
def test_an_empty_strategy_list_is_a_usage_error_not_every_strategy(names):
    # it ran every strategy (a full 13-phase showdown) for a list that named none
    done = seckill("showdown", "--strategies", names, "--users", "1", timeout=60)
    assert done.returncode == 2 and "--strategies" in done.stderr, (done.stdout, done.stderr)
    assert "serving the shop" not in done.stdout


def _is_locust(pid: int) -> bool:
    try:
        return b"locust" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_sigterm_stops_everything_the_showdown_started(tmp_path):
    out = (tmp_path / "out.txt").open("w")
    scratch = tmp_path / "tmp"  # the showdown's own TMPDIR: what it leaves there is seen
    scratch.mkdir()
    # a minute of sustained load: Locust is still running when signalled
    proc = subprocess.Popen([str(SECKILL), "showdown", "--sustained", "--duration", "60",
                             "--users", "50", "--strategies", "token"],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TMPDIR": str(scratch)})
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while not (locust := {p for p in _descendants(proc.pid) if _is_locust(p)}):
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "out.txt").read_text()
            time.sleep(0.2)
        started = _descendants(proc.pid)
        assert locust <= started, "Locust finished before the signal: nothing tested"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        # Locust was stopped and waited for before its scratch dir went: left running,
        # it wrote its CSVs into the dir being removed, which then stayed behind
        assert not locust & set(_children()), "Locust outlived the showdown"
        deadline = time.monotonic() + 20
        while (left := started & set(_children())) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"left running after SIGTERM: {sorted(left)}"
        assert not list(scratch.iterdir()), f"left behind: {list(scratch.iterdir())}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in started & set(_children()):  # only what this showdown started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out.close()


@pytest.mark.parametrize("nodes", ["0", "-3", "abc", "101"])
def test_seckill_redis_with_an_impossible_node_count_is_a_usage_error(capsys, nodes):
    # README's `seckill redis --nodes 5`: --nodes 0 was a ValueError traceback (exit 1)
    code, _, err = parse(capsys, ["redis", "--nodes", nodes])
    assert code == 2 and "usage: seckill redis" in err and "--nodes" in err, err


def test_zookeeper_named_where_none_can_run_is_an_error_not_an_empty_table(monkeypatch,
                                                                          tmp_path):
    """It printed a note, an empty table and exit 0: a strategy the user named was
    silently not run (a contract audit)."""
    monkeypatch.delenv("ZOOKEEPER_HOSTS", raising=False)
    monkeypatch.setenv("ZOOKEEPER_JARS", str(tmp_path))  # no ZooKeeper jars here
    done = seckill("showdown", "--strategies", "zookeeper", "--users", "1", "--stock", "1",
                   timeout=120)
    assert done.returncode == 1, (done.stdout[-1000:], done.stderr[-1000:])
    assert "zookeeper" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_showdown_with_an_unreachable_redis_url_is_one_line_and_exit_1(monkeypatch):
    from lockcore.embedded import free_port

    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")  # nothing there
    done = seckill("showdown", "--strategies", "atomic", "--users", "1", "--stock", "1",
                   timeout=120)
    assert done.returncode == 1, (done.stdout[-1000:], done.stderr[-1000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().count("\n") == 0, done.stderr[-2000:]  # one line


def test_a_strategy_named_twice_runs_once():
    from webapp.cli import build_parser

    args = build_parser().parse_args(["showdown", "--strategies", "atomic,token,atomic"])
    assert args.strategies == ["atomic", "token"]
    args = build_parser().parse_args(["showdown", "--strategies", " token ,, fair,token"])
    assert args.strategies == ["token", "fair"]


def test_a_sale_that_sold_nothing_is_a_failed_phase_not_ok():
    """A dead ZooKeeper: every purchase 503, nothing oversold, the audit consistent,
    and the row said "ok" with exit 0 (a contract audit)."""
    from loadtest.compare import NOTHING_SOLD, StrategyResult, failed

    dead = StrategyResult("zookeeper", True, users=10, stock=2, sold=0, consistent=True)
    assert dead.verdict == NOTHING_SOLD and failed([dead]) == [dead]
    sold = StrategyResult("zookeeper", True, users=10, stock=2, sold=2, consistent=True)
    assert sold.verdict == "ok" and failed([sold]) == []


@pytest.mark.parametrize("only", ["", ",", " , "])
def test_bench_only_naming_nothing_is_a_usage_error(capsys, only):
    code, _, err = parse(capsys, ["bench", f"--only={only}"])
    assert code == 2 and "no contender named" in err, err


def test_bench_with_an_unwritable_json_file_says_so_before_measuring(capsys):
    from loadtest import bench
    from webapp.cli import build_parser

    args = build_parser().parse_args(["bench", "--quick", "--only", "token-poll",
                                      "--json", "/proc/x/b.json"])
    assert bench.main(args) == 2
    assert "--json" in capsys.readouterr().err


def test_bench_with_a_directory_as_its_json_file_says_so_before_measuring(capsys, tmp_path):
    from loadtest import bench
    from webapp.cli import build_parser

    args = build_parser().parse_args(["bench", "--quick", "--only", "token-poll",
                                      "--json", str(tmp_path)])
    assert bench.main(args) == 2
    assert "is a directory" in capsys.readouterr().err


def test_an_empty_database_url_is_unset_for_the_shop_the_showdown_serves(monkeypatch):
    # as for seckill serve (and REDIS_URL here): DATABASE_URL= was handed to the shop
    # as it was, and the showdown stopped with "could not serve the shop:
    # ArgumentError: Could not parse SQLAlchemy URL from given URL string" (a CLI audit)
    import argparse

    from loadtest import serving

    monkeypatch.setenv("DATABASE_URL", "")
    args = argparse.Namespace(url=None, admin_token=None, workers=1, lock_timeout=None)
    with serving.serve_target(args, ["atomic"]) as target:
        assert target.strategies == ["atomic"]
        assert target.shop.healthy()
