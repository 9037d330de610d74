"""``seckill scenario``: the list, a bad name, and one real run end to end."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest

from loadtest import labs
from loadtest.labs import LABS, Narrator, Verdict
from webapp.cli import main


def test_list_names_every_lab_with_its_seed_and_title(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "--list"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert listed == list(LABS)
    assert len(listed) == 12
    assert re.search(r"^crash-no-ttl\s+seed 002\s+\S", out, re.MULTILINE)


def test_an_unknown_lab_exits_non_zero_naming_the_choices(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "no-such-lab"]) == 2
    err = capsys.readouterr().err
    assert "unknown lab 'no-such-lab'" in err
    assert "crash-no-ttl" in err


def test_list_with_a_name_is_a_usage_error_not_a_silent_list(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "--list", "crash-no-ttl"]) == 2
    captured = capsys.readouterr()
    assert "--list takes no lab name" in captured.err and not captured.out


def test_no_name_and_no_list_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario"]) == 2
    assert "--list" in capsys.readouterr().err


def test_a_lab_run_narrates_with_timestamps_and_ends_with_one_verdict_line() -> None:
    done = subprocess.run([sys.executable, "-m", "webapp.cli", "scenario", "wrong-release"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    verdicts = [line for line in lines if line.startswith("VERDICT:")]
    assert verdicts == [lines[-1]]
    assert "LockNotOwned" in lines[-1]
    assert any(re.match(r"\[ *\+\d+ ms\] B acquires", line) for line in lines)


def _fake_lab(run: Callable[[Narrator], Verdict]) -> SimpleNamespace:
    return SimpleNamespace(TITLE="a fake lab", SEED="999", run=run)


@pytest.mark.parametrize(("demonstrated", "code", "prefix"), [
    (True, 0, "VERDICT: it happened"),
    (False, 1, "VERDICT: NOT DEMONSTRATED: it happened"),
])
def test_the_exit_code_says_whether_the_lab_demonstrated_its_claim(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        demonstrated: bool, code: int, prefix: str) -> None:
    def run(narrator: Narrator) -> Verdict:
        narrator("A does %s", "something")
        return Verdict(demonstrated, "it happened")

    monkeypatch.setattr(labs, "load", lambda name: _fake_lab(run))
    assert main(["scenario", "fake"]) == code
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "== fake: a fake lab (seed 999) =="
    assert re.fullmatch(r"\[ *\+\d+ ms\] A does something", lines[1])
    assert lines[-1] == prefix


def test_a_lab_that_breaks_still_ends_with_exactly_one_verdict_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def run(narrator: Narrator) -> Verdict:
        raise RuntimeError("redis-server did not start")

    monkeypatch.setattr(labs, "load", lambda name: _fake_lab(run))
    assert main(["scenario", "fake"]) == 1
    out = capsys.readouterr().out
    verdicts = [line for line in out.splitlines() if line.startswith("VERDICT:")]
    assert verdicts == ["VERDICT: lab error, nothing demonstrated: RuntimeError: "
                        "redis-server did not start"]


def test_a_lab_without_its_system_part_is_skipped_and_one_that_fails_to_start_it_is_an_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # no java or ZooKeeper jars: "lab error" where a missing package or partition's
    # missing `ip` said SKIPPED (a CLI audit); a ZooKeeper that will not start is an error
    from lockcore.zkserver import ZooKeeperMissing, ZooKeeperUnavailable

    for error, verdict in [
            (ZooKeeperMissing("ZooKeeper needs java on PATH"),
             "VERDICT: NOT DEMONSTRATED: SKIPPED: ZooKeeper needs java on PATH"),
            (ZooKeeperUnavailable("ZooKeeper on port 1 did not start"),
             "VERDICT: lab error, nothing demonstrated: ZooKeeperUnavailable: ZooKeeper on "
             "port 1 did not start")]:
        def run(narrator: Narrator, error: Exception = error) -> Verdict:
            raise error

        monkeypatch.setattr(labs, "load", lambda name, run=run: _fake_lab(run))
        assert main(["scenario", "fake"]) == 1
        said = capsys.readouterr()
        assert [line for line in said.out.splitlines() if line.startswith("VERDICT:")] == \
            [verdict]
        assert ("Traceback" in said.err) is (verdict.count("lab error") == 1)


def test_an_error_while_unwinding_a_ctrl_c_is_an_interrupt_not_a_lab_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Ctrl-C while the watchdog lab's redis-server was frozen: the release on the way
    # out timed out, that TimeoutError replaced the KeyboardInterrupt, and the run said
    # "VERDICT: lab error" with exit 1 instead of 130 and no verdict (a labs audit)
    def run(narrator: Narrator) -> Verdict:
        try:
            raise KeyboardInterrupt
        finally:
            raise TimeoutError("Timeout reading from socket")

    monkeypatch.setattr(labs, "load", lambda name: _fake_lab(run))
    assert main(["scenario", "fake"]) == 130
    captured = capsys.readouterr()
    assert "VERDICT" not in captured.out
    assert "interrupted; everything it started is stopped" in captured.err


@pytest.fixture
def stop_signals_restored() -> Iterator[None]:
    """``webapp.cli.stop_on_term`` ignores every stop signal and sets ``STOPPING``: as
    they were, for the tests that follow."""
    import signal

    from webapp import cli

    previous = {stop_signal: signal.getsignal(stop_signal) for stop_signal in cli.STOP_SIGNALS}
    yield
    for stop_signal, handler in previous.items():
        signal.signal(stop_signal, handler)
    cli.STOPPING.clear()


def _interrupt_swallowed() -> None:
    """A Ctrl-C (``webapp.cli.stop_on_term``) inside kazoo's ``KazooClient._call``, whose
    bare ``except:`` around the socket write raises ConnectionClosedError instead."""
    import signal

    from webapp.cli import stop_on_term

    exceptions = pytest.importorskip("kazoo.exceptions")
    try:
        stop_on_term(signal.SIGINT, None)
    except BaseException:  # noqa: BLE001 - kazoo's bare except
        raise exceptions.ConnectionClosedError("Connection has been closed") from None


@pytest.mark.usefixtures("stop_signals_restored")
def test_an_error_after_a_ctrl_c_that_kazoo_swallowed_is_an_interrupt_not_a_lab_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Ctrl-C during ghost-node's release of B's lock: "VERDICT: lab error, nothing
    # demonstrated: ConnectionClosedError", a traceback and exit 1 (a labs audit)
    def run(narrator: Narrator) -> Verdict:
        _interrupt_swallowed()
        return Verdict(True, "never")

    monkeypatch.setattr(labs, "load", lambda name: _fake_lab(run))
    assert main(["scenario", "fake"]) == 130
    captured = capsys.readouterr()
    assert "VERDICT" not in captured.out
    assert "Traceback" not in captured.err
    assert "seckill scenario: interrupted; everything it started is stopped" in captured.err


@pytest.mark.usefixtures("stop_signals_restored")
def test_any_command_whose_ctrl_c_came_back_as_another_error_exits_130(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # the same swallowed Ctrl-C in a command with no catch-all of its own (bench,
    # serve, showdown ask kazoo too): a traceback, not "interrupted" and 130
    def command(args: object) -> int:
        _interrupt_swallowed()
        return 0

    monkeypatch.setattr(labs, "main", command)
    assert main(["scenario", "fake"]) == 130
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "seckill scenario: interrupted; everything it started is stopped" in captured.err


def test_a_ctrl_c_before_the_command_is_dispatched_names_the_command(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # in the first second (the parser imports every sub-command) it said "seckill:
    # interrupted; ..." (a labs audit)
    from webapp import cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["scenario", "ghost-node"]) == 130
    assert capsys.readouterr().err.startswith("seckill scenario: interrupted; ")


def test_a_lab_error_with_no_stop_signal_since_the_last_one_is_still_a_lab_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``STOPPING`` is per run: a Ctrl-C of an earlier in-process run does not turn a
    real error of this one into an interrupt."""
    from webapp import cli

    def run(narrator: Narrator) -> Verdict:
        raise RuntimeError("redis-server did not start")

    cli.STOPPING.set()
    try:
        monkeypatch.setattr(labs, "load", lambda name: _fake_lab(run))
        assert main(["scenario", "fake"]) == 1
    finally:
        cli.STOPPING.clear()
    assert "VERDICT: lab error" in capsys.readouterr().out


def test_a_ctrl_c_while_a_ghost_node_client_stops_stays_an_interrupt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``client.close`` and ``client.stop`` were two ExitStack callbacks: a Ctrl-C in
    stop made close raise "Cannot close connection until it is stopped", with no
    KeyboardInterrupt in its chain, and the run said "VERDICT: lab error" (a labs
    audit)."""
    pytest.importorskip("kazoo")
    from contextlib import nullcontext

    from loadtest.labs import ghost_node

    class Client:
        def __init__(self, **kwargs: object) -> None:
            self.stopped = False

        def start(self, timeout: float) -> None:
            pass

        def stop(self) -> None:
            raise KeyboardInterrupt  # Ctrl-C while its session closes

        def close(self) -> None:  # as kazoo's does, on a client not stopped
            if not self.stopped:
                raise Exception("Cannot close connection until it is stopped")  # noqa: TRY002

    class Server:
        pid, hosts = 1, "127.0.0.1:1"

    monkeypatch.setattr(ghost_node, "KazooClient", Client)
    monkeypatch.setattr(ghost_node, "ZooKeeperServer", lambda: nullcontext(Server()))
    with pytest.raises(BaseException) as raised:
        with ghost_node.zookeeper_sessions(Narrator(io.StringIO()), 2):
            pass
    assert labs.interrupted(raised.value), repr(raised.value)


def test_ctrl_c_while_the_watchdog_labs_redis_is_frozen_exits_130_and_leaves_nothing(
        tmp_path) -> None:
    import os
    import signal
    import time
    from pathlib import Path

    from tests.support import cmdline, descendants, running

    seckill = Path(sys.executable).parent / "seckill"
    proc = subprocess.Popen([str(seckill), "scenario", "watchdog"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    started: set[int] = set()
    out = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out += line
            started.update(descendants(proc.pid))
            if "is frozen (SIGSTOP)" in line:
                break
        else:
            pytest.fail(f"the lab never froze its redis-server:\n{out}")
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
        out += rest
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(running(pid) for pid in started):
            time.sleep(0.1)
        survivors = {pid: cmdline(pid) for pid in started if running(pid)}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    for pid in survivors:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, (out, err[-2000:])
    assert "VERDICT" not in out and "Traceback" not in err, (out, err[-2000:])
    assert not survivors, survivors


@pytest.mark.zookeeper
def test_ctrl_c_while_the_ghost_node_labs_clients_wait_exits_at_once(tmp_path) -> None:
    """Its clients' threads (B and C queued for up to 12 s) kept the process alive after
    "interrupted; everything it started is stopped" (a CLI audit: about 11 s, and a
    second Ctrl-C meanwhile printed a threading traceback)."""
    import os
    import signal
    import time
    from pathlib import Path

    from tests.support import need_zookeeper

    need_zookeeper("the ghost-node lab")
    seckill = Path(sys.executable).parent / "seckill"
    proc = subprocess.Popen([str(seckill), "scenario", "ghost-node"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    out = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out += line
            if "is the smallest" in line:  # B and C are queued, waiting
                break
        else:
            pytest.fail(f"the lab never queued its clients:\n{out}")
        proc.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        rest, err = proc.communicate(timeout=60)
        took_s = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, (out + rest, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    assert took_s < 7, f"exited {took_s:.1f} s after its Ctrl-C"


BLOCK_KAZOO = '''
import sys
class _NoKazoo:
    def find_spec(self, name, path=None, target=None):
        if name == "kazoo" or name.startswith("kazoo."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoKazoo())
'''


def test_a_lab_whose_optional_package_is_missing_says_so_in_its_verdict(tmp_path) -> None:
    """Without kazoo (an optional extra), ``scenario ghost-node`` printed a traceback
    and no VERDICT line, where ``--list`` already said "(unavailable: ...)" (a labs
    audit)."""
    (tmp_path / "sitecustomize.py").write_text(BLOCK_KAZOO)
    done = subprocess.run([sys.executable, "-m", "webapp.cli", "scenario", "ghost-node"],
                          capture_output=True, text=True, timeout=60,
                          env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    verdict = [line for line in done.stdout.splitlines() if line.startswith("VERDICT:")]
    assert verdict == ["VERDICT: NOT DEMONSTRATED: SKIPPED: needs the Python package "
                       "'kazoo' (pip install 'seckill[zookeeper]')"], done.stdout


@pytest.mark.parametrize("argv", [["scenario", "--list"], ["scenario", "crash-no-ttl"]],
                         ids=["list", "lab"])
def test_a_reader_that_stops_early_gets_no_traceback(argv: list[str]) -> None:
    """``seckill scenario --list | head -1`` printed a BrokenPipeError traceback (a lab
    two, the second from its VERDICT line; a labs audit). A closed pipe is the reader's
    "enough": quiet, exit 141 as a shell's SIGPIPE death would be."""
    proc = subprocess.Popen([sys.executable, "-m", "webapp.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # the reader is done: every later write meets a broken pipe
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 141, err
        assert "Traceback" not in err and "BrokenPipe" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]


@pytest.mark.parametrize("argv", [["scenario", "--list"], ["scenario", "crash-no-ttl"]],
                         ids=["list", "lab"])
def test_a_full_disk_under_stdout_is_one_line_not_a_traceback(argv: list[str]) -> None:
    # `seckill scenario --list > /dev/full` printed an OSError traceback (a CLI audit)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "webapp.cli", *argv], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "seckill scenario: cannot write: No space left on device" in done.stderr


DEAD_CHILD_LAB = '''
import subprocess, sys, types
import loadtest.labs as labs
from webapp import cli

def run(narrator):
    narrator("starting a child, which dies at once")
    child = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
    child.wait()
    child.stdin.write(b"write\\\\n" * 20000)
    child.stdin.flush()

labs.load = lambda name: types.SimpleNamespace(TITLE="a dead child", SEED="000", run=run)
sys.exit(cli.main(["scenario", "pause-past-ttl"]))
'''


def test_a_broken_pipe_of_the_labs_own_is_a_lab_error_not_a_reader_gone() -> None:
    """Writing to a child that died raises BrokenPipeError too: taken for ``| head``, the
    lab ended with 141, stdout muted and no verdict (a review)."""
    done = subprocess.run([sys.executable, "-c", DEAD_CHILD_LAB], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "VERDICT: lab error, nothing demonstrated: BrokenPipeError" in done.stdout, \
        done.stdout


def test_a_line_narrated_from_another_thread_into_a_closed_pipe_raises_nothing_there():
    """The watchdog lab narrates from its ``on_lost`` callback, in lockcore's renewal
    thread: ``seckill scenario watchdog | head -12`` raised BrokenPipeError there, and
    lockcore printed the failed callback's traceback (a labs audit). Only the main
    thread's next line ends the lab (141, quietly)."""
    import threading

    class Closed:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    narrator = Narrator(Closed())  # type: ignore[arg-type]
    raised: list[BaseException] = []

    def callback() -> None:
        try:
            narrator("on_lost('stock:sku-1'): no renewal reached the backend")
        except BaseException as exc:  # noqa: BLE001 - what the test looks for
            raised.append(exc)

    thread = threading.Thread(target=callback)
    thread.start()
    thread.join(10)
    assert raised == []
    with pytest.raises(BrokenPipeError):
        narrator("VERDICT: ...")  # the main thread: the lab ends here
    assert len(narrator.lines) == 2


@pytest.mark.usefixtures("stop_signals_restored")
def test_a_stop_in_one_cli_run_is_not_seen_by_a_later_caller(monkeypatch):
    """``cli.STOPPING`` stayed set after an interrupted run: a lab called in-process
    afterwards turned its own error into an interrupt (a review: KeyboardInterrupt,
    which ended the whole pytest session)."""
    import argparse
    import signal

    from loadtest import labs
    from webapp import cli

    def interrupted(args):
        cli.stop_on_term(signal.SIGINT, None)

    monkeypatch.setattr(labs, "main", interrupted)
    assert cli.main(["scenario", "fake"]) == 130
    monkeypatch.undo()

    def run(narrator):
        raise RuntimeError("redis-server did not start")

    monkeypatch.setattr(labs, "load", lambda name: _fake_lab(run))
    assert not cli.STOPPING.is_set()
    assert labs.main(argparse.Namespace(list=False, name="fake")) == 1
