"""A real network partition on one machine: a network namespace and a veth cable we can cut.

The partition lab needs the lock holder to lose the network the way a real node does:
its packets stop arriving, its sockets stay open, nothing tells it. A mock would only
show what we already believe, so we build it from the kernel's parts (needs root and
iproute2):

* a network namespace of our own (``skp<pid>``) with its own loopback;
* a veth pair, one end in the root namespace (``10.213.N.1``), one inside (``10.213.N.2``);
  the addresses exist only on this cable, which only this lab created;
* ``cut()`` is ``ip link set <island end> down``, inside the island: the root side keeps
  its route to the island (now "linkdown") and the cable silently drops whatever it
  sends, so every open TCP connection just goes quiet and a new one times out. (Taking
  the *root* end down would remove that route and send the island's addresses out of
  the default route; a ``blackhole`` route for the subnet guards against that too.)
  ``heal()`` brings the island end back up.

``Island.close()`` kills what it started inside by pid and deletes the namespace,
which deletes the veth pair with it. ``unsupported()`` says why this machine cannot
do it (not root, no ``ip``, namespaces refused) so the lab can skip, saying why.

A lab killed by SIGKILL runs no ``close()``. What it started inside dies with it (tied
with SIGKILL, see ``spawn``), but the kernel keeps the namespace, the veth and the
blackhole route. So ``Island.open()`` first sweeps what such a lab left
(``sweep_leftovers``): a namespace ``skp<pid>`` (exactly that name) whose process is
dead, what still runs inside it, its veth ``skh<pid>``, its subnet's blackhole route,
and blackhole routes of ours whose subnet no interface has any more (a reused subnet's
``route add`` would fail). A live lab's are never touched: two labs may run at once.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from lockcore.lifeline import tied_to_parent

logger = logging.getLogger(__name__)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10,
                          check=check)


def unsupported() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2 (the ip command) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"skprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add refused: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    # the cable too: root without CAP_NET_ADMIN (a container's default) may add a
    # namespace but no link, and the lab ended in a traceback (a labs audit)
    host_end = f"skvh{os.getpid()}"
    cable = _ip("link", "add", host_end, "type", "veth", "peer", "name",
                f"skvn{os.getpid()}", check=False)
    if cable.returncode != 0:
        return f"ip link add (a veth cable) refused: {cable.stderr.strip()}"
    _ip("link", "del", host_end, check=False)
    return None


#: names our labs give their namespace and host veth end: the lab's pid after a prefix
_NAMESPACE, _HOST_END = re.compile(r"skp(\d+)"), re.compile(r"skh(\d+)")
#: the subnets our labs take (10.213.N.0/24) and the metric of their blackhole routes
_OURS = ipaddress.IPv4Network("10.213.0.0/16")
_BLACKHOLE_METRIC = "4242"


def _pid_dead(pid: int) -> bool:
    """No such process, or only its zombie (a SIGKILLed lab nobody has reaped yet). A
    pid reused by an unrelated process counts as alive: its namespace is left alone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _leftover_pids() -> set[int]:
    """Pids of dead labs that left a namespace ``skp<pid>`` or a host veth ``skh<pid>``."""
    names = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines()
             if line.strip()]
    pids = {int(m[1]) for name in names if (m := _NAMESPACE.fullmatch(name))}
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3 and (m := _HOST_END.fullmatch(fields[1].strip().split("@")[0])):
            pids.add(int(m[1]))
    return {pid for pid in pids if _pid_dead(pid)}


def _kill_inside(namespace: str, wait_s: float = 5.0) -> None:
    """SIGKILL, by pid, every process still in ``namespace``; wait (bounded) for them."""
    listed = _ip("netns", "pids", namespace, check=False).stdout.split()
    pids = [int(pid) for pid in listed if pid.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        logger.info("sweep: killed pid %s left in namespace %s", pid, namespace)
    deadline = time.monotonic() + wait_s
    while any(not _pid_dead(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _host_subnet(host_end: str) -> str | None:
    """The 10.213.N.0/24 of a host veth end's address (None if it has none of ours)."""
    for line in _ip("-4", "-o", "addr", "show", "dev", host_end, check=False).stdout.splitlines():
        fields = line.split()
        if "inet" in fields:
            network = ipaddress.IPv4Interface(fields[fields.index("inet") + 1]).network
            if network.subnet_of(_OURS):
                return str(network)
    return None


def _drop_blackhole(subnet: str) -> None:
    _ip("route", "del", "blackhole", subnet, "metric", _BLACKHOLE_METRIC, check=False)


def _orphan_blackholes() -> list[str]:
    """Our blackhole routes (10.213.N.0/24, metric 4242) whose subnet no interface has an
    address in any more: a live lab adds its address before its route, and deletes it
    (its veth) before its route, so every live lab's route has one."""
    orphans = []
    for line in _ip("-4", "route", "show", "type", "blackhole", check=False).stdout.splitlines():
        fields = line.split()
        if len(fields) < 2 or fields[0] != "blackhole":
            continue
        metric = fields[fields.index("metric") + 1] if "metric" in fields[:-1] else None
        try:
            network = ipaddress.IPv4Network(fields[1])
        except ValueError:
            continue
        if (metric == _BLACKHOLE_METRIC and network.prefixlen == 24
                and network.subnet_of(_OURS)
                and not _ip("-4", "-o", "addr", "show", "to", str(network),
                            check=False).stdout.strip()):
            orphans.append(str(network))
    return orphans


def sweep_leftovers() -> None:
    """Remove what partition labs killed by SIGKILL left behind (their ``close()`` never
    ran): for each namespace ``skp<pid>`` or veth ``skh<pid>`` whose pid is dead, the
    processes inside (SIGKILL, by pid), the veth pair, the blackhole route of its subnet
    and the namespace; then our blackhole routes that no interface's address belongs to."""
    for pid in sorted(_leftover_pids()):
        namespace, host_end = f"skp{pid}", f"skh{pid}"
        logger.warning("sweeping %s / %s, left by lab pid %s (dead)", namespace, host_end, pid)
        _kill_inside(namespace)
        subnet = _host_subnet(host_end)  # before the veth goes, and its address with it
        _ip("link", "del", host_end, check=False)
        if subnet is not None:
            _drop_blackhole(subnet)
        _ip("netns", "del", namespace, check=False)
    for subnet in _orphan_blackholes():
        logger.warning("sweeping blackhole route %s metric %s: no interface has that "
                       "subnet any more", subnet, _BLACKHOLE_METRIC)
        _drop_blackhole(subnet)


def free_subnet(start: int) -> str:
    """A 10.213.N /24 that no interface here uses yet (two labs may run at once)."""
    for offset in range(250):
        subnet = f"10.213.{(start + offset) % 250}"
        if not _ip("-4", "-o", "addr", "show", "to", f"{subnet}.0/24").stdout.strip():
            return subnet
    raise RuntimeError("every 10.213.N.0/24 subnet is in use")


class Island:
    """A network namespace joined to the root namespace by one veth cable."""

    def __init__(self) -> None:
        pid = os.getpid()
        self.name = f"skp{pid}"
        self.host_end, self.ns_end = f"skh{pid}", f"skn{pid}"
        subnet = free_subnet(pid % 250)
        self.subnet = f"{subnet}.0/24"
        self.host_ip, self.ns_ip = f"{subnet}.1", f"{subnet}.2"
        self.procs: list[subprocess.Popen[Any]] = []
        self._created = False

    def open(self) -> Island:
        sweep_leftovers()  # what labs killed by SIGKILL left (a reused subnet's route, ...)
        try:
            _ip("netns", "add", self.name)
            self._created = True
            _ip("link", "add", self.host_end, "type", "veth", "peer", "name", self.ns_end)
            _ip("link", "set", self.ns_end, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/24", "dev", self.host_end)
            _ip("link", "set", self.host_end, "up")
            # never let packets for the island leave by the default route
            _ip("route", "add", "blackhole", self.subnet, "metric", _BLACKHOLE_METRIC)
            for args in (("addr", "add", f"{self.ns_ip}/24", "dev", self.ns_end),
                         ("link", "set", self.ns_end, "up"), ("link", "set", "lo", "up")):
                _ip("-n", self.name, *args)
        except BaseException:
            self.close()
            raise
        logger.info("namespace %s: %s <-> %s", self.name, self.host_ip, self.ns_ip)
        return self

    def spawn(self, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the namespace; ``ip netns exec`` execs it, so the pid is
        the program's own and ``close()`` can kill it.

        It is tied to this process with SIGKILL (``lockcore.lifeline``): setpriv sets
        ``PR_SET_PDEATHSIG``, which survives both execs (``ip``, then ``argv``), so the
        kernel kills it when the lab dies, even by SIGKILL. KILL, not TERM: an island
        process may be frozen (SIGSTOP), and a stopped process acts on nothing else."""
        proc: subprocess.Popen[Any] = subprocess.Popen(
            tied_to_parent(["ip", "netns", "exec", self.name, *argv], "KILL"),
            start_new_session=True, **popen)
        self.procs.append(proc)
        return proc

    def cut(self) -> None:
        """The partition: the cable goes dark, both ways, without a word to anyone."""
        _ip("-n", self.name, "link", "set", self.ns_end, "down")

    def heal(self) -> None:
        _ip("-n", self.name, "link", "set", self.ns_end, "up")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                logger.warning("pid %s did not exit after SIGKILL", proc.pid)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self.procs.clear()
        _ip("link", "del", self.host_end, check=False)
        _drop_blackhole(self.subnet)
        if self._created:
            _ip("netns", "del", self.name, check=False)
            self._created = False

    def __enter__(self) -> Island:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
