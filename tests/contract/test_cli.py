"""``seckill`` as a user types it: every documented command has help, and a bad flag
or value is a usage error (exit 2, ``usage:`` on stderr) before anything starts,
never a traceback.

The console script is run for real once per kind of check; the many argument cases
go through the same parser in-process (``webapp.cli.build_parser``), since each
``seckill`` start costs seconds of imports on a loaded machine."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lockcore.embedded import free_port
from tests.contract.wire import request
from tests.support import PG_ADMIN_URL, cmdline, descendants, missing_system_part, parent, running
from webapp.cli import build_parser

SECKILL = Path(sys.executable).parent / "seckill"


def seckill(*args: str, timeout: float = 30.0, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the console script; on timeout, SIGTERM it (it stops what it started: a
    plain ``subprocess.run`` timeout SIGKILLs it, and its redis-servers live on)."""
    proc = subprocess.Popen([str(SECKILL), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            cwd=cwd, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        err += f"\n(still running after {timeout}s: stopped)"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def interrupt_and_wait(proc: subprocess.Popen[str], started: list[int],
                       timeout: float) -> tuple[str, str]:
    """Ctrl-C ``proc`` and read the rest of its output; if it outlives ``timeout``,
    SIGKILL it and ``started`` (its children) by pid, then re-raise."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)  # reads, closes the pipes, waits
    except subprocess.TimeoutExpired:
        for pid in [*descendants(proc.pid), *started]:  # clean up by pid, then report
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.communicate()
        raise


COMMANDS = ("serve", "showdown", "scenario", "bench")


def parse(capsys, args):
    """What the parser does with ``args``: (exit code or None, stdout, stderr)."""
    try:
        build_parser().parse_args(args)
        code = None
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_console_script_answers_help_and_usage_errors():
    assert SECKILL.exists() and os.access(SECKILL, os.X_OK)
    helped = seckill("--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: seckill")
    for command in COMMANDS:
        assert command in helped.stdout
    refused = seckill("serve", "--port", "abc")
    assert refused.returncode == 2 and "usage: seckill serve" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_documented_command_has_help(capsys, command):
    code, out, err = parse(capsys, [command, "--help"])
    assert code == 0 and out.startswith(f"usage: seckill {command}"), err


def test_help_names_the_documented_flags(capsys):
    assert {"--host", "--port", "--workers"} <= set(parse(capsys, ["serve", "--help"])[1].split())
    showdown = parse(capsys, ["showdown", "--help"])[1]
    for flag in ("--users", "--stock", "--strategies", "--report"):
        assert flag in showdown


@pytest.mark.parametrize("command", ["serve", "showdown", "scenario", "bench"])
def test_help_summaries_are_whole_sentences(capsys, command):
    summary = parse(capsys, [command, "--help"])[1].split("\n\n")[1].strip()
    assert not summary.endswith(","), f"seckill {command}: {summary!r}"


def test_scenario_list_names_the_seed_labs():
    result = seckill("scenario", "--list")
    assert result.returncode == 0, result.stderr
    names = {line.split()[0] for line in result.stdout.splitlines() if line.strip()}
    assert {"crash-no-ttl", "ghost-node", "failover"} <= names


def test_an_unknown_scenario_is_exit_2_with_the_list_of_labs():
    result = seckill("scenario", "nope")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "crash-no-ttl" in result.stderr


def seckill_redis(nodes: int) -> subprocess.Popen[str]:
    return subprocess.Popen([str(SECKILL), "redis", "--nodes", str(nodes)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def test_seckill_redis_nodes_5_prints_five_live_servers_and_ctrl_c_stops_them():
    """The README's ``seckill redis --nodes 5``, as typed: only its usage errors were
    tested. It must print one URL a line, then ``REDLOCK_URLS=`` naming them all (what
    ``seckill serve`` reads), every one a redis-server that answers, until Ctrl-C."""
    import redis

    proc = seckill_redis(5)
    started: list[int] = []
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(6)]
        started = descendants(proc.pid)
        urls, last = lines[:5], lines[5]
        assert last == "REDLOCK_URLS=" + ",".join(urls), lines
        assert len(set(urls)) == 5 and len(started) >= 5, (lines, started)
        for url in urls:
            with redis.Redis.from_url(url, socket_timeout=5) as client:
                assert client.ping(), url
    finally:
        rest, err = interrupt_and_wait(proc, started, 30)
    assert proc.returncode == 0 and "Traceback" not in err, err[-1000:]
    assert not [pid for pid in started if running(pid)]


def test_seckill_redis_says_which_server_exited_on_its_own_and_exits_1():
    """A server that died (killed, out of memory) ended ``seckill redis`` with exit 0
    and no word, as a Ctrl-C does (a CLI audit)."""
    proc = seckill_redis(2)
    started: list[int] = []
    try:
        assert proc.stdout is not None
        urls = [proc.stdout.readline().strip() for _ in range(2)]
        started = descendants(proc.pid)
        victim = next(pid for pid in started if urls[1].split("/")[2] in cmdline(pid))
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            interrupt_and_wait(proc, started, 30)
    assert proc.returncode == 1, (out, err)
    assert f"the redis-server at {urls[1]} exited on its own" in err, err
    assert "Traceback" not in err
    assert not [pid for pid in started if running(pid)]


BAD_ARGS = {
    "no-command": [],
    "unknown-command": ["nope"],
    "unknown-flag": ["bench", "--nope"],
    "port-not-a-number": ["serve", "--port", "abc"],
    "flag-without-value": ["serve", "--workers"],
    "stock-not-a-number": ["showdown", "--stock", "x"],
    "port-out-of-range": ["serve", "--port", "99999"],
    "zero-workers": ["serve", "--workers", "0"],
}


IMPOSSIBLE = {
    "negative-users": ["showdown", "--users", "-5"],
    "negative-stock": ["showdown", "--stock", "-1"],
    "unknown-strategy": ["showdown", "--strategies", "token,nope"],
    "lock-timeout-negative": ["showdown", "--lock-timeout", "-1"],
    "lock-timeout-nan": ["showdown", "--lock-timeout", "nan"],
    "url-not-a-url": ["showdown", "--url", "notaurl"],
    "bench-unknown-contender": ["bench", "--only", "token-notify,nosuch"],
    "bench-duration-nan": ["bench", "--duration", "nan"],
    "bench-duration-inf": ["bench", "--duration", "inf"],
    "bench-zero-rounds": ["bench", "--rounds", "0"],
    "bench-zero-processes": ["bench", "--processes", "0"],
    # were OverflowError tracebacks once everything had started
    "bench-duration-huge": ["bench", "--duration", "3e6"],
    "bench-uncontended-huge": ["bench", "--uncontended", "1e308"],
    # every phase failed with "Locust made no requests" (it had made 1,639)
    "sustained-one-second": ["showdown", "--sustained", "--duration", "1"],
}
CASES = [pytest.param(args, id=name) for name, args in {**BAD_ARGS, **IMPOSSIBLE}.items()]


@pytest.mark.parametrize("args", CASES)
def test_a_bad_command_line_is_a_usage_error(capsys, args):
    code, _, err = parse(capsys, args)
    assert code == 2, f"parsed without complaint: {args}"
    assert "usage: seckill" in err


@pytest.mark.parametrize("args", [["serve", "--bogus"], ["scenario", "oversell", "extra"],
                                  ["redis", "--port", "1"], ["showdown", "--user", "5", "x"]])
def test_an_argument_a_command_does_not_know_is_its_error_with_its_usage(capsys, args):
    # the top parser said "unrecognized arguments" under "usage: seckill [-h] COMMAND
    # ...", nothing about the command's own options (a CLI audit)
    from webapp.cli import main

    with pytest.raises(SystemExit) as exited:
        main(args)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert f"usage: seckill {args[0]} " in err and f"seckill {args[0]}: error: " in err, err
    assert "unrecognized arguments: " in err, err


@pytest.mark.parametrize("value", ["abc", "-5", "nan"])
def test_showdown_with_a_bad_lock_timeout_s_names_it_in_one_line(value):
    # was a ValueError traceback from the plan, exit 1 (serve named it, exit 2)
    env = {**os.environ, "LOCK_TIMEOUT_S": value}
    proc = seckill("showdown", "--users", "2", "--strategies", "atomic", env=env)
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith("seckill showdown: error: LOCK_TIMEOUT_S "), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not proc.stdout, proc


def test_bench_results_it_cannot_write_are_one_line_after_the_run():
    # /dev/full passes the check before the run (a writable file); the disk filling
    # during a run is the same: an OSError traceback after minutes of measuring
    proc = seckill("bench", "--quick", "--only", "token-poll", "--json", "/dev/full",
                   timeout=120)
    assert proc.returncode == 1, proc
    assert "seckill bench: error: could not write /dev/full: No space left" in proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


# ::1 was gunicorn's "'' is not a valid port"; --port 0 (any free port) was refused
@pytest.mark.parametrize("host, port", [(None, None), ("::1", None), (None, 0)])
def test_serve_prints_url_and_token_serves_and_ctrl_c_stops_all_it_started(tmp_path, host,
                                                                            port):
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "DATABASE_URL", "REDLOCK_URLS", "SECKILL_ADMIN_TOKEN")}
    on = ["--host", host] if host else []
    port = free_port() if port is None else port
    proc = subprocess.Popen([str(SECKILL), "serve", *on, "--port", str(port)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    started: list[int] = []
    try:
        printed = {}
        assert proc.stdout is not None
        for line in proc.stdout:  # ends when serve prints its last line or dies
            said = re.match(r"(storefront|admin token|log)\s+(\S+)", line)
            if said:
                printed[said[1]] = said[2]
            if "Ctrl-C" in line:
                break
        assert {"storefront", "admin token"} <= set(printed), printed
        url, token = printed["storefront"].rstrip("/"), printed["admin token"]
        assert host is None or url.startswith("http://[::1]:"), url
        assert port == 0 or url.endswith(f":{port}"), url
        assert not url.endswith(":0"), url
        started = descendants(proc.pid)
        assert request(url, "GET", "/healthz").status == 200
        answer = request(url, "PUT", "/api/admin/sales/sku-1", {"stock": 3, "strategy": "sql"},
                         headers={"Authorization": f"Bearer {token}"})
        assert answer.status == 200, answer.body
    finally:
        rest, _ = interrupt_and_wait(proc, started, 60)
    assert proc.returncode == 0 and "Traceback" not in rest, rest[-1000:]
    assert started and not [pid for pid in started if running(pid)]
    # the shop's log outlives it (its warnings were in a temp dir removed on exit)
    assert printed["log"] == str(tmp_path / "instance" / "seckill-serve.log"), printed
    assert Path(printed["log"]).is_file()  # warnings only: empty when all went well


def test_serve_given_ctrl_c_four_times_still_stops_all_and_leaves_no_scratch_dirs(tmp_path):
    """An impatient user: the later presses interrupted the stop itself ("Exception
    ignored in atexit callback" tracebacks, the shop's and its Redis servers' scratch
    dirs left in /tmp: a CLI audit)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "DATABASE_URL", "REDLOCK_URLS", "SECKILL_ADMIN_TOKEN")}
    proc = subprocess.Popen([str(SECKILL), "serve", "--port", str(free_port())],
                            cwd=tmp_path, env={**env, "TMPDIR": str(scratch)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    started: list[int] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "Ctrl-C" in line:
                break
        started = descendants(proc.pid)
        assert started and any(scratch.iterdir())
        for _ in range(4):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.2)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            for pid in [*descendants(proc.pid), *started]:
                if running(pid):
                    os.kill(pid, signal.SIGKILL)
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, rest[-2000:]
    assert "Traceback" not in rest and "Exception ignored" not in rest, rest[-2000:]
    assert not [pid for pid in started if running(pid)]
    assert not list(scratch.iterdir()), list(scratch.iterdir())


def test_serve_on_a_port_in_use_says_so_and_starts_nothing(tmp_path):
    """Not a traceback, not the URL and token of someone else's server: exit 1."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
        proc = seckill("serve", "--port", str(port), cwd=tmp_path, env=env,
                   timeout=60)
    assert proc.returncode == 1, proc
    assert f"127.0.0.1:{port}" in proc.stderr and "in use" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "admin token" not in proc.stdout
    assert not (tmp_path / "instance").exists()  # checked before anything was started


def test_showdown_against_a_url_where_nothing_answers_is_one_line_and_exit_1():
    done = seckill("showdown", "--url", f"http://127.0.0.1:{free_port()}", "--users", "5",
                   "--strategies", "atomic")
    assert done.returncode == 1, done
    assert "cannot reach the shop" in done.stderr and "Traceback" not in done.stderr + done.stdout


def _signalled(args: list[str], signum: int, enough: int,
               started_when: float = 1.0) -> tuple[int | None, str, dict[int, str]]:
    """Run ``seckill *args`` until it has ``enough`` processes below it, send ``signum``;
    (its exit code, its stderr, what it started that still runs: killed here, by pid).
    Its temp dirs go in a scratch ``TMPDIR``, removed here: a SIGKILL leaves them.
    It starts with SIGHUP at its default, as under a terminal: a suite run by
    ``nohup`` (or a CI runner that ignores SIGHUP) would hand it down ignored, and serve
    keeps an ignored SIGHUP ignored (nohup's promise)."""
    import shutil
    import tempfile
    import time

    scratch = tempfile.mkdtemp(prefix="seckill-test-signalled-")
    proc = subprocess.Popen([str(SECKILL), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, "TMPDIR": scratch},
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    started: set[int] = set()
    survivors: dict[int, str] = {}
    err = ""
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            started.update(descendants(proc.pid))
            if len(started) >= enough:
                time.sleep(started_when)  # let them get to work
                started.update(descendants(proc.pid))
                break
            time.sleep(0.1)
        assert len(started) >= enough, (started, proc.poll())
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        # multiprocessing's resource tracker leaves when it sees its parent's pipe close;
        # gunicorn, told TERM by the kernel, stops its workers within graceful_timeout
        # (5 s) and their last undo tries (2 s): 5 s was short on a loaded machine (a
        # fresh-clone run saw gunicorn still stopping)
        grace = time.monotonic() + 12
        while [pid for pid in started if running(pid)] and time.monotonic() < grace:
            time.sleep(0.1)
        survivors = {pid: cmdline(pid) for pid in started if running(pid)}  # judged below
        for pid in survivors:  # cleaned up by pid whatever happened
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        shutil.rmtree(scratch, ignore_errors=True)
    return proc.returncode, err, survivors


def test_bench_stopped_by_sigterm_stops_every_process_it_started():
    """`timeout`, `kill` and CI stop a run with SIGTERM: its workers, redis-servers and
    ZooKeeper must go with it, not run on without a parent."""
    # a redis-server, the resource tracker and the four --quick workers, started and
    # handed their work (a worker still reading it from the pipe would print an
    # EOFError when its parent stops: a narrow window, not what this tests)
    code, err, survivors = _signalled(["bench", "--quick"], signal.SIGTERM, 6)
    assert code == 130, err[-1000:]
    assert "everything it started is stopped" in err and "Traceback" not in err, err[-1000:]
    assert not survivors


def test_a_lab_stopped_by_sigterm_stops_its_shop_and_redis():
    """``seckill scenario`` had no SIGTERM handler: `timeout` killed it and left its
    gunicorn and redis-server running with no parent (a contract audit)."""
    code, err, survivors = _signalled(["scenario", "process-lock"], signal.SIGTERM, 3)
    assert code == 130, err[-1000:]
    assert "Traceback" not in err, err[-1000:]
    assert not survivors, survivors


def test_serve_whose_terminal_closes_stops_everything_it_started():
    """Closing the terminal sends SIGHUP: serve died of it, and gunicorn and six
    redis-servers ran on with no parent (a contract audit)."""
    code, err, survivors = _signalled(["serve", "--port", str(free_port()), "--workers", "1"],
                                      signal.SIGHUP, 7, started_when=3.0)
    assert code in (0, 130), err[-1000:]  # stopped once serving, or while starting
    assert not survivors, survivors


def test_a_background_jobs_early_ctrl_c_stops_serve():
    """A script's ``seckill serve &`` starts with SIGINT ignored, and seckill took it
    only after importing every sub-command (1.4 s and more): a Ctrl-C then was lost,
    and serve started six redis-servers and gunicorn and ran on (a CLI audit)."""
    import time

    proc = subprocess.Popen([str(SECKILL), "serve", "--port", "0", "--workers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    started: set[int] = set()
    try:
        time.sleep(0.4)  # the interpreter is up, the sub-commands still importing
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            started.update(descendants(proc.pid))
            time.sleep(0.1)
        assert proc.poll() == 130, "the Ctrl-C was lost: serve ran on"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # the second one it takes
            proc.communicate(timeout=60)
        else:
            proc.communicate()
        time.sleep(0.5)
        for pid in [pid for pid in started if running(pid)]:
            os.kill(pid, signal.SIGKILL)
    assert not [pid for pid in started if running(pid)]


def test_serve_started_by_nohup_outlives_its_terminal(tmp_path):
    """``nohup seckill serve &`` starts it with SIGHUP ignored, to outlive the terminal;
    seckill took SIGHUP over anyway and stopped when the terminal closed (a serve audit).
    An ignored SIGHUP stays ignored; SIGTERM still stops everything cleanly."""
    import time

    with _serving(tmp_path, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
                  ) as (proc, printed):
        proc.send_signal(signal.SIGHUP)  # the terminal closed
        deadline = time.monotonic() + 5
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, "SIGHUP stopped a serve started with it ignored"
        with urllib.request.urlopen(printed["storefront"] + "healthz", timeout=10) as answer:
            assert answer.status == 200  # still serving
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (proc.returncode, err[-1000:])
    assert "Traceback" not in err, err[-1000:]
    assert not printed["survivors"], printed["survivors"]


def test_serve_killed_by_sigkill_takes_what_it_started_with_it():
    """SIGKILL (the OOM killer, ``kill -9``) runs no cleanup: gunicorn and six
    redis-servers ran on with no parent, holding their ports. They die with it now."""
    code, err, survivors = _signalled(["serve", "--port", str(free_port()), "--workers", "1"],
                                      signal.SIGKILL, 7, started_when=3.0)
    assert code == -signal.SIGKILL, err[-1000:]
    assert not survivors, survivors


@contextlib.contextmanager
def _serving(tmp_path: Path, env: dict[str, str] | None = None,
             preexec_fn: Callable[[], object] | None = None,
             ) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    """``seckill serve`` on a free port, once it has printed its last line: yields the
    process and what it printed (``Redis`` -> its URL); kills whatever it started that
    is still running at the end, and records those pids in ``survivors``. ``preexec_fn``
    runs in the child before seckill starts (a signal ignored, as a shell does)."""
    import time

    proc = subprocess.Popen([str(SECKILL), "serve", "--port", str(free_port()),
                             "--workers", "1"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env, preexec_fn=preexec_fn)
    started: list[int] = []
    printed: dict[str, str] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # serving once it prints its last line
            name, _, value = line.partition(" ")
            printed[name] = value.strip()
            if "Ctrl-C" in line:
                break
        started = descendants(proc.pid)
        printed["pids"] = " ".join(map(str, started))
        yield proc, printed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        time.sleep(0.5)
        survivors = {pid: cmdline(pid) for pid in started if running(pid)}
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
        printed["survivors"] = repr(survivors) if survivors else ""


def test_serve_whose_gunicorn_dies_says_so_exits_1_and_stops_the_rest(tmp_path):
    """gunicorn's master killed (the OOM killer, a stray kill): serve exited 0 and said
    nothing (a contract audit). It says so, exits 1 and stops its Redis nodes."""
    with _serving(tmp_path) as (proc, printed):
        started = [int(pid) for pid in printed["pids"].split()]
        masters = [pid for pid in started
                   if "gunicorn" in cmdline(pid) and parent(pid) == proc.pid]
        assert masters, {pid: cmdline(pid) for pid in started}
        os.kill(masters[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "gunicorn exited" in err, (proc.returncode, err[-1000:])
    assert not printed["survivors"], printed["survivors"]


def test_serve_says_once_when_its_embedded_redis_exits(tmp_path):
    """The page went on answering from the database while every purchase was refused,
    and serve's terminal said nothing (an audit): it names the Redis that exited, once,
    and keeps serving (the page names the outage too) until Ctrl-C."""
    import time

    with _serving(tmp_path) as (proc, printed):
        redis_port = int(printed["Redis"].rsplit(":", 1)[1].split("/")[0])
        shop_redis = [int(pid) for pid in printed["pids"].split()
                      if f"redis-server 127.0.0.1:{redis_port}" in cmdline(int(pid))]
        assert len(shop_redis) == 1, printed
        os.kill(shop_redis[0], signal.SIGKILL)
        time.sleep(2.5)
        assert proc.poll() is None  # still serving
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (proc.returncode, err[-1000:])
    said = [line for line in err.splitlines() if "exited on its own" in line]
    assert len(said) == 1 and f"the shop's Redis (embedded, port {redis_port})" in said[0], err
    assert not printed["survivors"], printed["survivors"]


def test_a_second_serve_in_the_folder_logs_to_a_file_of_its_own_and_says_so(tmp_path):
    # two serves in one folder (each its own database) wrote one seckill-serve.log, and
    # one moving it aside left the other writing into the moved file (a serve audit)
    import fcntl

    (tmp_path / "instance").mkdir()
    with open(tmp_path / "instance" / "seckill-serve.log.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another serve's log
        with _serving(tmp_path) as (proc, printed):
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-1000:]
    assert printed["log"] == str(tmp_path / "instance" / f"seckill-serve-{proc.pid}.log")
    assert "seckill-serve.log is another seckill serve's" in err, err[-1000:]
    assert not printed["survivors"], printed["survivors"]


def test_serve_notes_lock_servers_that_do_not_answer_and_serves_anyway(tmp_path):
    # every redlock and zookeeper purchase was refused, and nothing said so at start;
    # not refused (a lab starts its nodes later; RedLock outlives a minority)
    import socket

    # ports bound and never listened on: refused, and no other test's server can take
    # one meanwhile (with free ports, one of the five answered once: "4 of 5", the
    # fresh-clone run of session 51)
    held = [socket.socket() for _ in range(6)]
    try:
        for sock in held:
            sock.bind(("127.0.0.1", 0))
        ports = [sock.getsockname()[1] for sock in held]
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
        env["REDLOCK_URLS"] = ",".join(f"redis://127.0.0.1:{p}/0" for p in ports[:5])
        env["ZOOKEEPER_HOSTS"] = f"127.0.0.1:{ports[5]}"
        err = _notes_of_a_serve(tmp_path, env)
    finally:
        for sock in held:
            sock.close()
    assert ("note: REDLOCK_URLS: 5 of 5 nodes cannot be used" in err
            and "refused (503) until a majority answers" in err), err
    assert f"note: ZOOKEEPER_HOSTS: no server answers at 127.0.0.1:{ports[5]}" in err, err
    assert "names 5 nodes" not in err, err


def test_serve_notes_redlock_nodes_too_few_to_outlive_one_down(tmp_path):
    # two nodes were served without a word: a majority of two is both, so RedLock there
    # outlives no node's loss (a CLI audit)
    from lockcore.embedded import EmbeddedRedis

    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    with EmbeddedRedis(nodes=2) as nodes:
        env["REDLOCK_URLS"] = ",".join(nodes.urls)
        err = _notes_of_a_serve(tmp_path, env)
    assert ("note: REDLOCK_URLS names 2 nodes: a majority of 2 is every one" in err
            and "cannot be used" not in err), err


def test_serve_names_what_a_refusing_redlock_node_answered_and_ignores_gunicorn_cmd_args(
        tmp_path):
    # a node with a wrong db index (or password) answers, with an error: it was "do not
    # answer"; and GUNICORN_CMD_ARGS=--daemon reached gunicorn, which left a shop
    # running that nobody stopped, holding the port, while serve failed (a CLI audit)
    from lockcore.embedded import EmbeddedRedis

    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env["GUNICORN_CMD_ARGS"] = "--daemon"
    with EmbeddedRedis(nodes=3) as nodes:
        wrong_db = nodes.urls[2].rsplit("/", 1)[0] + "/99"
        env["REDLOCK_URLS"] = ",".join([*nodes.urls[:2], wrong_db])
        err = _notes_of_a_serve(tmp_path, env)
    assert (f"note: REDLOCK_URLS: 1 of 3 nodes cannot be used ({wrong_db}: " in err
            and "DB index is out of range" in err and "still has a majority" in err), err
    assert "note: GUNICORN_CMD_ARGS is ignored" in err, err


def _notes_of_a_serve(tmp_path: Path, env: dict[str, str]) -> str:
    """What ``seckill serve`` with ``env`` said on stderr, once it served and a Ctrl-C
    stopped it cleanly, leaving nothing running."""
    with _serving(tmp_path, env) as (proc, printed):
        assert printed.get("storefront", "").startswith("http://")  # it serves
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert not printed["survivors"], printed["survivors"]
    return err


@pytest.mark.parametrize(("setting", "named"), [
    ("REDLOCK_URLS=garbage", "REDLOCK_URLS"),   # was: served, then every purchase 500
    ("REDLOCK_URLS=,,", "REDLOCK_URLS"),  # was read as unset: five embedded nodes
    # one server five times: was served, then every redlock purchase 503 (never a majority)
    ("REDLOCK_URLS=" + ",".join(["redis://127.0.0.1:1/0"] * 5), "REDLOCK_URLS"),
    # one server under two names: accepted, one server two votes (a CLI audit)
    ("REDLOCK_URLS=redis://127.0.0.1:1/0,redis://localhost:1/0,redis://127.0.0.1:2/0",
     "REDLOCK_URLS"),
    ("LOCK_TIMEOUT_S=-5", "LOCK_TIMEOUT_S"),    # was: served, then every reset 500
    ("LOCK_TIMEOUT_S=abc", "LOCK_TIMEOUT_S"),   # was: gunicorn's HaltServer traceback
    ("REDIS_URL=garbage", "REDIS_URL"),
    ("REDIS_URL=redis://127.0.0.1:1/abc", "REDIS_URL"),  # was db 0 of that server
    ("DATABASE_URL=garbage", "DATABASE_URL"),
    # these were tracebacks or an unnamed "could not start", exit 1
    ("DATABASE_URL=postgresql+psycopg://root:pw@127.0.0.1:notaport/db", "DATABASE_URL"),
    ("DATABASE_URL=nosuchdb://x/y", "DATABASE_URL"),
    ("DATABASE_URL=sqlite://", "DATABASE_URL"),  # in memory: one per worker
    ("DATABASE_URL=sqlite:///:memory:", "DATABASE_URL"),
    ("DATABASE_URL=mysql://u@127.0.0.1/db", "DATABASE_URL"),  # no MySQLdb: unnamed, exit 1
    # no Authorization header can carry these: was served, and every admin call was 401
    ("SECKILL_ADMIN_TOKEN=   ", "SECKILL_ADMIN_TOKEN"),
    ("SECKILL_ADMIN_TOKEN= tok ", "SECKILL_ADMIN_TOKEN"),
    # Latin-1 bytes, not UTF-8: was served, and every admin call was a 500 (a CLI audit)
    ("SECKILL_ADMIN_TOKEN=t\udcf6k", "SECKILL_ADMIN_TOKEN"),
    # read by gunicorn_conf.py: a worker that never came up after a minute, or taken
    ("SECKILL_WORKER_CONNECTIONS=abc", "SECKILL_WORKER_CONNECTIONS"),
    ("SECKILL_WORKER_CONNECTIONS=0", "SECKILL_WORKER_CONNECTIONS"),
    ("SECKILL_GC_GEN0_THRESHOLD=-1", "SECKILL_GC_GEN0_THRESHOLD"),
    ("LOCK_STRATEGY=nosuch", "LOCK_STRATEGY"),  # was "could not start", exit 1
    ("LOCK_STRATEGY=zookeeper", "ZOOKEEPER_HOSTS"),  # served, then every purchase 503
    # noted as "no server answers there", then every zookeeper purchase 500 (a CLI audit)
    ("ZOOKEEPER_HOSTS=127.0.0.1:2181,", "ZOOKEEPER_HOSTS"),
    ("SECKILL_GC_GEN0_THRESHOLD=3000000000", "SECKILL_GC_GEN0_THRESHOLD"),  # no worker booted
    # also read by gunicorn_conf.py: every server started, then gunicorn did not become
    # healthy with "Unknown level: 'VERBOSE'" or "invalid literal for int()", unnamed,
    # exit 1 (a CLI audit)
    ("SECKILL_LOG_LEVEL=verbose", "SECKILL_LOG_LEVEL"),
    ("SECKILL_WORKERS=four", "SECKILL_WORKERS"),
    # a pasted newline: served, the token printed over two lines, every admin call refused
    ("SECKILL_ADMIN_TOKEN=ab\ncd", "SECKILL_ADMIN_TOKEN"),
])
def test_serve_with_a_bad_setting_names_it_in_one_line_and_starts_nothing(
        tmp_path, setting, named):
    name, value = setting.split("=", 1)
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "DATABASE_URL", "ZOOKEEPER_HOSTS", "ZK_HOSTS")}
    proc = seckill("serve", "--port", str(free_port()), cwd=tmp_path, env={**env, name: value},
                   timeout=60)
    assert proc.returncode == 2, proc
    assert named in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "admin token" not in proc.stdout
    assert not (tmp_path / "instance").exists()


@pytest.mark.parametrize("name", ["REDIS_URL", "REDLOCK_URLS", "DATABASE_URL"])
def test_a_bad_url_is_named_without_its_password(tmp_path, name):
    value = {"DATABASE_URL": "postgresql+psycopg://root:S3cret@127.0.0.1:badport/db"}.get(
        name, "redis://:S3cret@127.0.0.1:badport/0")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    proc = seckill("serve", "--port", str(free_port()), cwd=tmp_path, env={**env, name: value},
                   timeout=60)
    assert proc.returncode == 2 and name in proc.stderr, proc
    assert "S3cret" not in proc.stderr + proc.stdout and "***" in proc.stderr, proc.stderr


def test_serve_with_an_unreachable_redis_url_is_one_line_and_exit_1(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["REDIS_URL"] = f"redis://127.0.0.1:{free_port()}/0"
    proc = seckill("serve", "--port", str(free_port()), cwd=tmp_path, env=env,
                   timeout=60)
    assert proc.returncode == 1, proc
    assert "REDIS_URL" in proc.stderr and "cannot reach" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("where", ["unmakeable-folder", "a-folder", "not-a-database"])
def test_serve_with_a_sqlite_file_it_cannot_use_names_database_url(tmp_path, where):
    # was "could not start: FileNotFoundError: [Errno 2] No such file or directory:
    # '/proc/...'" (or "DatabaseError: file is not a database"), unnamed (a CLI audit)
    (tmp_path / "notes.txt").write_text("not a database, " * 100)
    path = {"unmakeable-folder": "/proc/seckill-no-such/x.db", "a-folder": str(tmp_path),
            "not-a-database": str(tmp_path / "notes.txt")}[where]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    proc = seckill("serve", "--port", str(free_port()), cwd=tmp_path,
                   env={**env, "DATABASE_URL": f"sqlite:///{path}"}, timeout=60)
    assert proc.returncode == 1, proc
    assert "DATABASE_URL" in proc.stderr and path in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert (tmp_path / "notes.txt").read_text() == "not a database, " * 100


@pytest.mark.parametrize("database_given", [False, True], ids=["default-db", "DATABASE_URL"])
def test_serve_in_a_folder_it_cannot_write_says_so_not_database_url(tmp_path, database_given):
    # a read-only folder: "DATABASE_URL sqlite:////.../instance/seckill.sqlite: cannot
    # use ..." with DATABASE_URL unset, "could not start: PermissionError: ..." with it
    # set (a CLI audit). /proc: no user may make a folder there, root included
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    if database_given:
        env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'shop.sqlite'}"
    proc = seckill("serve", "--port", str(free_port()), cwd=Path("/proc"), env=env, timeout=60)
    assert proc.returncode == 1, proc
    assert "cannot write the shop's log" in proc.stderr and "/proc/instance" in proc.stderr
    assert ("SQLite" in proc.stderr) is not database_given, proc.stderr
    assert "DATABASE_URL" not in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers (a frozen host, a wrong port)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


@pytest.mark.parametrize("name", ["DATABASE_URL", "REDIS_URL"])
def test_serve_with_a_server_that_never_answers_names_it_and_exits(tmp_path, silent_server,
                                                                    name):
    # DATABASE_URL there hung `seckill serve` (and the showdown) for good
    value = {"DATABASE_URL": f"postgresql+psycopg://root@127.0.0.1:{silent_server}/x",
             "REDIS_URL": f"redis://127.0.0.1:{silent_server}/0"}[name]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    proc = seckill("serve", "--port", str(free_port()), cwd=tmp_path, env={**env, name: value},
                   timeout=60)
    assert proc.returncode == 1 and name in proc.stderr, proc
    assert "Traceback" not in proc.stderr and "admin token" not in proc.stdout


def test_serve_with_a_missing_postgres_database_names_database_url(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env["DATABASE_URL"] = PG_ADMIN_URL.rsplit("/", 1)[0] + "/seckill_no_such_database"
    proc = seckill("serve", "--port", str(free_port()), cwd=tmp_path, env=env,
                   timeout=60)
    if "Connection refused" in proc.stderr:
        missing_system_part(f"PostgreSQL at {PG_ADMIN_URL} is unreachable")
    assert proc.returncode == 1, proc
    assert "DATABASE_URL" in proc.stderr and "does not exist" in proc.stderr, proc.stderr


@pytest.mark.parametrize("setting, named", [
    ("REDIS_URL=foo", "REDIS_URL"), ("DATABASE_URL=garbage", "DATABASE_URL"),
    ("SECKILL_LOCK_COHORT_MAX_PASSES=x", "SECKILL_LOCK_COHORT_MAX_PASSES")])
def test_showdown_names_a_bad_setting_before_serving(setting, named):
    # was "could not serve the shop: ValueError: Redis URL must specify ...", unnamed
    name, value = setting.split("=", 1)
    proc = seckill("showdown", "--users", "2", "--strategies", "atomic",
                   env={**os.environ, name: value})
    assert proc.returncode == 1 and f"seckill showdown: error: {named}" in proc.stderr, proc
    assert "serving the shop" not in proc.stdout and "Traceback" not in proc.stderr


@pytest.mark.parametrize("host", ["", "a b", "[::1"])
def test_serve_refuses_a_host_that_is_no_address(capsys, host):
    # '' waited 60 s for a gunicorn bound nowhere; '[::1' was a ValueError
    code, _, err = parse(capsys, ["serve", "--host", host])
    assert code == 2 and "not an address or host name" in err


def test_serve_takes_an_ipv6_address_as_written_in_a_url():
    args = build_parser().parse_args(["serve", "--host", "[::1]"])
    assert args.host == "::1"


def test_serve_in_a_folder_with_its_own_webapp_and_an_empty_redis_url_serves_the_shop(
        tmp_path):
    # gunicorn ran in the user's folder: its `webapp/` was imported instead of the shop
    # (a traceback cut mid-word); an empty REDIS_URL was "Redis URL must specify one of
    # the following schemes"; a relative SQLite path must still mean the user's folder
    for package in ("webapp", "lockcore"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("raise SystemExit('not the shop')\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDLOCK_URLS", "SECKILL_ADMIN_TOKEN")}
    env.update(REDIS_URL="", DATABASE_URL="sqlite:///orders/shop.sqlite")
    with _serving(tmp_path, env) as (proc, printed):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        url = printed["storefront"].rstrip("/")
        assert request(url, "GET", "/healthz").status == 200
        assert request(url, "POST", "/api/products/sku-1/purchase",
                       {"user_id": "here"}).status == 201
        assert printed["database"] == f"sqlite:///{tmp_path / 'orders' / 'shop.sqlite'}"
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert (tmp_path / "orders" / "shop.sqlite").stat().st_size > 0
    assert not printed["survivors"], printed["survivors"]


def _second_serve(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return seckill("serve", "--port", str(free_port()), "--workers", "1", cwd=tmp_path,
                   env=env, timeout=90)


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("REDIS_URL", "DATABASE_URL", "REDLOCK_URLS", "SECKILL_ADMIN_TOKEN")}
    return {**env, **settings}


def test_a_second_serve_on_the_same_database_with_its_own_redis_is_refused(tmp_path):
    # two serves in one folder shared ./instance/seckill.sqlite, each with its own
    # embedded Redis and so its own stock and lock: `token` sold 199 of 100 units
    with _serving(tmp_path, _env()) as (first, printed):
        second = _second_serve(tmp_path, _env())
        assert second.returncode == 1, second
        assert f"another seckill shop (pid {first.pid})" in second.stderr, second.stderr
        assert "sell the stock twice" in second.stderr and "admin token" not in second.stdout
        url = printed["storefront"].rstrip("/")
        assert request(url, "POST", "/api/products/sku-1/purchase",
                       {"user_id": "still-one-shop"}).status == 201
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert not printed["survivors"], printed["survivors"]


def test_serves_given_the_same_lock_servers_may_share_the_database(tmp_path, redis_url,
                                                                   redlock_cluster):
    # the several-hosts layout: one Redis, one set of RedLock nodes, any number of shops
    shared = _env(REDIS_URL=redis_url, REDLOCK_URLS=",".join(redlock_cluster.urls))
    with _serving(tmp_path, shared) as (first, printed):
        with _serving(tmp_path, shared) as (second, also):
            assert "storefront" in also, second.stderr.read() if second.stderr else ""
            second.send_signal(signal.SIGINT)
            second.communicate(timeout=60)
        # not a shop starting RedLock nodes of its own (redlock sold 20 of 10 that way),
        # nor one given another Redis (token sold 20 of 10)
        own_nodes = _second_serve(tmp_path, _env(REDIS_URL=redis_url))
        assert own_nodes.returncode == 1, own_nodes
        assert "Redis servers of its own" in own_nodes.stderr, own_nodes.stderr
        other = _second_serve(tmp_path, {**shared, "REDIS_URL": redis_url[:-1] + "1"})
        assert other.returncode == 1 and "other lock servers" in other.stderr, other
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert not printed["survivors"] and not also["survivors"]
