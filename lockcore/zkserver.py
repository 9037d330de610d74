"""Start a real standalone ZooKeeper on a free loopback port and stop it by pid.

Like ``embedded.py`` for Redis: the tests and the ghost-node lab own their ZooKeeper.
We run the Debian package's ``zookeeper.jar`` (its manifest names its dependencies)
with plain ``java`` and a generated ``zoo.cfg``; ``zkServer.sh`` would read
``/etc/zookeeper``, write to ``/var/log`` and run one server shared by everybody.

Why these settings:
* ``tickTime=200`` with ``minSessionTimeout=400``: sessions can be short, so a test
  can expire one (and watch a lock be lost) in well under a second.
* ``admin.enableServer=false``: the admin HTTP server would grab port 8080.
* ``4lw.commands.whitelist=ruok,srvr``: ``start()`` waits for ``ruok`` -> ``imok`` and
  for ``srvr`` to report a mode (``imok`` comes before the server accepts sessions).
* ``-Xmx256m``, serial GC, C1 only: a small, fast-starting JVM (about 0.3 s here).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from .embedded import _stop_process, free_port
from .lifeline import tied_to_parent

logger = logging.getLogger(__name__)

JAR_DIR = Path(os.environ.get("ZOOKEEPER_JARS", "/usr/share/java"))
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
JVM_OPTIONS = ["-Xmx256m", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dzookeeper.jmx.log4j.disable=true", "-Dzookeeper.admin.enableServer=false"]
_live: dict[int, subprocess.Popen[bytes]] = {}
#: data dirs we made and have not removed yet: removed at exit, after the processes
_own_dirs: set[Path] = set()


class ZooKeeperUnavailable(RuntimeError):
    """ZooKeeper cannot be served here: missing (``ZooKeeperMissing``), or it did not
    start."""


class ZooKeeperMissing(ZooKeeperUnavailable):
    """java or the ZooKeeper jars are missing (``apt-get install zookeeper``)."""


def four_letter_word(port: int, word: str = "ruok", timeout: float = 0.5) -> str:
    """Send a ZooKeeper four-letter command and return the answer ('' if unreachable)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def any_answers(hosts: str, timeout: float = 0.5) -> bool:
    """Whether any server of a ZooKeeper hosts string (``host:port,...[/chroot]``, read
    by kazoo's own ``collect_hosts``) accepts a connection; False for a bad string."""
    from kazoo.hosts import collect_hosts

    try:
        servers, _chroot = collect_hosts(hosts)
    except ValueError:
        return False
    for host, port in servers:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            continue
    return False


def classpath() -> str:
    """zookeeper.jar (its manifest pulls in netty, jute, ...) plus a quiet slf4j binding.

    ZooKeeperMissing names the part that is missing: it said "needs java on PATH and
    .../zookeeper.jar" whichever one it was, or both (a labs audit)."""
    java = shutil.which("java")
    server_jar = JAR_DIR / "zookeeper.jar"
    jars_hint = "ZOOKEEPER_JARS names another folder of its jars"
    if java is None and not server_jar.exists():
        raise ZooKeeperMissing(
            f"ZooKeeper needs java on PATH and {server_jar}: neither is here (Debian: "
            f"apt-get install zookeeper; {jars_hint})")
    if java is None:
        raise ZooKeeperMissing(
            f"ZooKeeper needs java on PATH: there is none ({server_jar} is here; Debian: "
            "apt-get install default-jre-headless)")
    if not server_jar.exists():
        raise ZooKeeperMissing(
            f"ZooKeeper needs {server_jar}: it is not there (java is on PATH; Debian: "
            f"apt-get install zookeeper; {jars_hint})")
    jars = [server_jar]
    for binding in ("slf4j-simple.jar", "slf4j-nop.jar"):
        if (JAR_DIR / binding).exists():
            jars.append(JAR_DIR / binding)
            break
    return os.pathsep.join(str(j) for j in jars)


class ZooKeeperServer:
    """One standalone ZooKeeper process; ``with ZooKeeperServer() as zk: zk.hosts``."""

    def __init__(self, port: int | None = None, *, tick_ms: int = 200) -> None:
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.workdir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def serving(self) -> bool:
        """``ruok`` -> ``imok`` says the JVM is up; ``srvr`` naming a mode says it serves."""
        return (four_letter_word(self.port, "ruok") == "imok"
                and "Mode:" in four_letter_word(self.port, "srvr"))

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        """Start the server and return once it answers requests."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        cp = classpath()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"seckill-zk-{self.port}-"))
            _own_dirs.add(self.workdir)  # gone at exit even if a Ctrl-C cut stop() short
        config = self.workdir / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_ms}\ninitLimit=10\nsyncLimit=5\n"
            f"minSessionTimeout={2 * self.tick_ms}\nmaxSessionTimeout=60000\n"
            f"dataDir={self.workdir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\nmaxClientCnxns=200\n")
        log = (self.workdir / "zookeeper.log").open("ab")
        # KILL when our process dies, as for the embedded redis-server: a scratch server
        # that a test or lab may freeze (SIGSTOP), and a stopped process acts on SIGKILL
        # only. Nothing is lost: ZooKeeper syncs each transaction to its log before it
        # answers, and the data dir is a temp dir nobody reads once we are gone.
        self.proc = subprocess.Popen(tied_to_parent(["java", *JVM_OPTIONS, "-cp", cp,
                                                     MAIN_CLASS, str(config)], "KILL"),
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     start_new_session=True)
        log.close()
        _live[self.proc.pid] = self.proc
        deadline = time.monotonic() + timeout
        try:
            while not self.serving():
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = (self.workdir / "zookeeper.log").read_text(errors="replace")[-1500:]
                    raise ZooKeeperUnavailable(
                        f"ZooKeeper on port {self.port} did not start:\n{tail}")
                time.sleep(0.05)
        except BaseException:  # also Ctrl-C/SIGTERM while it starts: nothing left behind
            self.stop()
            raise
        logger.info("ZooKeeper pid %s on %s", self.proc.pid, self.hosts)
        return self

    def kill(self) -> None:
        """Stop the process but keep the data dir, so ``start()`` brings the same data back."""
        proc, self.proc = self.proc, None
        if proc is not None:
            _stop_process(proc)
            _live.pop(proc.pid, None)

    def stop(self) -> None:
        """Stop the process (by pid) and remove its data dir."""
        self.kill()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            _own_dirs.discard(self.workdir)
            self.workdir = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for proc in list(_live.values()):
        _stop_process(proc)
    for workdir in list(_own_dirs):
        shutil.rmtree(workdir, ignore_errors=True)
