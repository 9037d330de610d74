"""Helpers shared by the test packages (fixtures live in conftest.py files)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"
ROOT = Path(__file__).resolve().parent.parent


def make_recipe(target: str) -> list[str]:
    """The command ``make <target>`` runs, as the Makefile has it (``$(VENV)``,
    ``$(SERVE_ARGS)``, each variable read as its ``?=`` default): ``make demo`` ->
    ``[".venv/bin/seckill", "showdown", "--report", ...]``.

    Tests of what a make target does run this, not a copy of it: ``make demo`` was broken
    for a whole session while every test gave the showdown an absolute ``--report``."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(rf"^{re.escape(target)}:.*\n\t(.+)$", makefile, re.M)
    assert found, f"the Makefile has no target {target!r} with a recipe"
    defaults = dict(re.findall(r"^(\w+)\s*\?=[ \t]*(.*)$", makefile, re.M))
    assert "VENV" in defaults, "the Makefile sets no default VENV"
    recipe = re.sub(r"\$\((\w+)\)", lambda used: defaults.get(used[1], used[0]), found[1])
    return shlex.split(recipe)


class JsonStub(BaseHTTPRequestHandler):
    """A stand-in HTTP server's handler base (another shop, an nginx upstream): quiet, and
    ``answer_json`` writes a JSON answer with its length, as gunicorn's would be."""

    def answer_json(self, status: int, payload: object,
                    headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def missing_system_part(reason: str) -> None:
    """Skip loudly when a system package or service is missing; under CI=true, fail."""
    message = f"MISSING SYSTEM PART: {reason}"
    if IN_CI:
        pytest.fail(message + " (CI=true: the test suite must not skip this)")
    pytest.skip(message)


def need_zookeeper(what: str) -> None:
    """``missing_system_part`` unless java *and* ZooKeeper's jars are here (what
    ``lockcore.zkserver`` needs to start a server): java alone is not ZooKeeper."""
    from lockcore.zkserver import ZooKeeperUnavailable, classpath

    try:
        classpath()
    except ZooKeeperUnavailable as exc:
        missing_system_part(f"{exc}: {what}")


def need_network_namespaces(what: str) -> None:
    """``missing_system_part`` unless this process may build network namespaces (root,
    iproute2): the partition lab says SKIPPED and exits 1 without them."""
    from loadtest.labs import netns

    reason = netns.unsupported()
    if reason is not None:
        missing_system_part(f"network namespaces: {reason}: {what}")


def need_setpriv(what: str) -> None:
    """``missing_system_part`` unless util-linux's ``setpriv`` offers ``--pdeathsig``
    (2.33 and later). Where it does, ``lockcore.lifeline`` must use it: a skip keyed on
    ``_setpriv() is None`` hid a probe that failed for another reason, and with it every
    server left untied to its parent (a test audit)."""
    from lockcore.lifeline import _setpriv

    setpriv = shutil.which("setpriv")
    offered = setpriv is not None and "--pdeathsig" in subprocess.run(
        [setpriv, "--help"], capture_output=True, text=True, timeout=10).stdout
    if not offered:
        missing_system_part(f"setpriv --pdeathsig (util-linux >= 2.33): {what}")
    assert _setpriv() == setpriv, \
        f"{setpriv} offers --pdeathsig, yet lockcore.lifeline does not use it: {what}"


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists (a reaped child does not; a zombie would)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def parent(pid: int) -> int:
    """A process's parent pid (``/proc/<pid>/stat``). :raises OSError: it is gone."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children, their children, ...), zombies included."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                above = parent(int(entry))
            except OSError:
                continue
            children.setdefault(above, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def running(pid: int) -> bool:
    """The process is there and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def state(pid: int) -> str:
    """A process's state letter (``/proc/<pid>/stat``: R, S, T for stopped, Z...), or
    "gone"."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def gone_within(pid: int, seconds: float) -> bool:
    """Whether the process stops running (or is only a zombie) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


def cmdline(pid: int) -> str:
    """A process's command line, spaces for NULs, cut at 200 characters; "?" if gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


class FakeClock:
    """A clock whose sleep advances time instantly, so timeout tests run in microseconds."""

    def __init__(self, start: float = 1_000.0, wall: float = 1_700_000_000.0) -> None:
        self.now = start
        self.wall_offset = wall - start
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now + self.wall_offset

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(seconds, 0)


PG_ADMIN_URL = os.environ.get("SECKILL_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@contextlib.contextmanager
def scratch_postgres(prefix: str) -> Iterator[tuple[Any, str, str]]:
    """A PostgreSQL database of our own, dropped afterwards: ``(admin, name, url)``.

    Other suites share the server, so the name carries the pid and a random suffix;
    ``url`` is a SQLAlchemy URL (``postgresql+psycopg://``).
    """
    import psycopg

    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        missing_system_part(f"PostgreSQL at {PG_ADMIN_URL} is unreachable: {exc}")
        return
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
        try:
            yield admin, name, f"{base}/{name}"
        finally:
            # a test may have refused connections to it (the outage tests do)
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
