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
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
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
    return None


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
        try:
            _ip("netns", "add", self.name)
            self._created = True
            _ip("link", "add", self.host_end, "type", "veth", "peer", "name", self.ns_end)
            _ip("link", "set", self.ns_end, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/24", "dev", self.host_end)
            _ip("link", "set", self.host_end, "up")
            # never let packets for the island leave by the default route
            _ip("route", "add", "blackhole", self.subnet, "metric", "4242")
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
        _ip("route", "del", "blackhole", self.subnet, "metric", "4242", check=False)
        if self._created:
            _ip("netns", "del", self.name, check=False)
            self._created = False

    def __enter__(self) -> Island:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
