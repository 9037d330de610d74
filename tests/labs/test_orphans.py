"""Nothing a lab started outlives a lab killed by SIGKILL (which runs no clean-up).

* A holder child (``holder.Child``) frozen by SIGSTOP dies with its parent: it is tied
  with SIGKILL, the one signal a stopped process acts on.
* A process in a partition lab's island (``Island.spawn``) dies with the lab, frozen
  or not, although ``ip netns exec`` stands between them (PDEATHSIG survives the exec).
* The namespace, veth and blackhole route such a lab leaves, and anything untied still
  running inside, are swept by the next ``Island().open()``; a live lab's are not.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.labs import netns
from tests.support import gone_within, missing_system_part, need_setpriv, running, state

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def setpriv_here() -> None:
    """util-linux's setpriv ties a lab's children to it; under CI=true it must be here."""
    need_setpriv("a lab's children tied to it")


needs_setpriv = pytest.mark.usefixtures("setpriv_here")

FROZEN_CHILD = r'''
import signal, time
from loadtest.labs.holder import Child
child = Child("timeit", ["-n", "1", "-r", "1", "import time; time.sleep(90)"])
time.sleep(0.5)  # python is running timeit: setpriv has set PDEATHSIG and exec'd it
child.signal(signal.SIGSTOP)
print(child.pid, flush=True)
time.sleep(90)
'''

#: a lab that opens an island and runs ``sleep`` in it: one from the main thread (tied,
#: then frozen) and one from a worker thread (never tied: what an older seckill left)
ISLAND_LAB = r'''
import signal, subprocess, threading, time
from loadtest.labs import netns
island = netns.Island().open()
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
tied = island.spawn(["sleep", "90"], **quiet)
box = []
worker = threading.Thread(target=lambda: box.append(island.spawn(["sleep", "90"], **quiet)))
worker.start()
worker.join()
time.sleep(0.5)  # both have exec'd sleep inside the namespace
tied.send_signal(signal.SIGSTOP)
print(island.name, island.host_end, island.subnet, tied.pid, box[0].pid, flush=True)
time.sleep(90)
'''


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def _start(script: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, cwd=ROOT, env=_env())


def _first_line(proc: subprocess.Popen[str], timeout: float = 30) -> list[str]:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise TimeoutError(f"pid {proc.pid} said nothing for {timeout}s")
    line = proc.stdout.readline().split()
    assert line, f"pid {proc.pid} exited with {proc.wait(timeout=10)} before it was ready"
    return line


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def _kill(pids: list[int]) -> None:
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def _has_link(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True,
                          timeout=10).returncode == 0


def _blackhole(subnet: str) -> bool:
    out = subprocess.run(["ip", "-4", "route", "show", "type", "blackhole", subnet],
                         capture_output=True, text=True, timeout=10).stdout
    return "metric 4242" in out


def _remove(name: str, host_end: str, subnet: str) -> None:
    """What a dead lab left, removed by hand (works without the sweep, too)."""
    subprocess.run(["ip", "link", "del", host_end], capture_output=True, timeout=10)
    subprocess.run(["ip", "route", "del", "blackhole", subnet, "metric", "4242"],
                   capture_output=True, timeout=10)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


@pytest.fixture
def namespaces_here() -> Iterator[None]:
    reason = netns.unsupported()
    if reason is not None:
        missing_system_part(f"network namespaces: {reason}")
    yield


@needs_setpriv
def test_a_frozen_holder_child_dies_with_a_parent_killed_by_sigkill() -> None:
    parent = _start(FROZEN_CHILD)
    pids: list[int] = []
    try:
        pids = [int(_first_line(parent)[0])]
        deadline = time.monotonic() + 10
        while state(pids[0]) != "T":
            assert time.monotonic() < deadline, "the child was never frozen"
            time.sleep(0.01)
        parent.kill()
        parent.wait(timeout=10)
        assert gone_within(pids[0], 10), "a frozen holder child outlived its dead lab"
    finally:
        _stop(parent)
        _kill(pids)


@contextlib.contextmanager
def _island_lab() -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """``ISLAND_LAB`` running: it and its first line (namespace, veth, subnet, the tied
    and the untied pid); on leaving, whatever is left of it is removed by hand."""
    lab = _start(ISLAND_LAB)
    pids: list[int] = []
    left: list[str] = []
    try:
        line = _first_line(lab)
        left, pids = line[:3], [int(pid) for pid in line[3:]]
        yield lab, line
    finally:
        _stop(lab)
        _kill(pids)
        if left:
            _remove(*left)


@pytest.mark.netns
@needs_setpriv
def test_an_island_process_dies_with_a_lab_killed_by_sigkill(namespaces_here: None) -> None:
    with _island_lab() as (lab, (_, _, _, tied, _)):
        lab.kill()
        lab.wait(timeout=10)
        assert gone_within(int(tied), 10), \
            "a frozen process in the island outlived its lab (ip netns exec lost PDEATHSIG?)"


@pytest.mark.netns
def test_what_a_sigkilled_lab_left_is_swept_by_the_next_island_but_a_live_labs_is_not(
        namespaces_here: None) -> None:
    with _island_lab() as (lab, (name, host_end, subnet, _, untied)):
        # while the lab lives, another lab's island leaves everything of it alone
        netns.Island().open().close()
        assert name in _namespaces() and _has_link(host_end) and _blackhole(subnet)
        assert running(int(untied))

        lab.kill()  # SIGKILL: no close(), no clean-up of any kind
        lab.wait(timeout=10)
        time.sleep(0.5)
        assert running(int(untied)), "precondition: an untied process is left inside"
        assert name in _namespaces() and _has_link(host_end) and _blackhole(subnet)

        netns.Island().open().close()
        assert name not in _namespaces(), f"namespace {name} of a dead lab is still there"
        assert not _has_link(host_end), f"veth {host_end} of a dead lab is still there"
        assert not _blackhole(subnet), f"blackhole route of {subnet} is still there"
        assert gone_within(int(untied), 5), "the process left in the namespace still runs"


@pytest.mark.netns
def test_a_blackhole_route_no_interface_belongs_to_is_swept(namespaces_here: None) -> None:
    """A lab killed between removing its veth and its route left the route alone: the
    next lab on that subnet could not add its own."""
    subnet = f"{netns.free_subnet(os.getpid() % 250 + 7)}.0/24"
    subprocess.run(["ip", "route", "add", "blackhole", subnet, "metric", "4242"],
                   check=True, capture_output=True, timeout=10)
    try:
        netns.Island().open().close()
        assert not _blackhole(subnet), f"the orphan blackhole route of {subnet} is still there"
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", subnet, "metric", "4242"],
                       capture_output=True, timeout=10)


@pytest.mark.timeout(30)
def test_process_lock_act_1_interrupted_before_its_buyers_start_does_not_wait_for_them(
        redis_client, monkeypatch):
    """A SIGTERM between the act's first submit and its gate opening (a KeyboardInterrupt
    there) left the act's pool waiting on buyers that waited on the gate, for ever: the
    lab outlived a fresh-clone CI run's 60 s. Now it unwinds at once."""
    from concurrent.futures import ThreadPoolExecutor

    from loadtest.labs import process_lock

    real_submit = ThreadPoolExecutor.submit
    submitted: list[int] = []

    def interrupted_at_the_fifth(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        submitted.append(1)
        if len(submitted) == 5:
            raise KeyboardInterrupt
        return real_submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", interrupted_at_the_fifth)
    with pytest.raises(KeyboardInterrupt):
        process_lock._sell_in_threads(redis_client, None)
    assert len(submitted) == 5
