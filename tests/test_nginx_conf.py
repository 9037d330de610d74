"""deploy/nginx.conf run by a real nginx (Debian's), in front of a stub of the shop.

No Docker runs here, so the shipped file is changed only where the compose network
would differ: the port it listens on, the upstream's address (``web:8000`` becomes a
loopback port), the pid file and temp dirs, and, for the 504 tests alone, a 1 s read
timeout. What is checked is what the file itself decides: the shop's own answers pass
through untouched (status, JSON, ``Retry-After``), and nginx's own errors (a body or URL
too large for it, a replica not answering or too slow) come in the API's shape
``{"error", "detail"}`` too, never nginx's HTML page.

Several replicas: Docker's DNS answers ``web`` with one address per replica and nginx
round-robins over them, moving to the next on a failure as ``proxy_next_upstream``
says. The tests that need two replicas put an ``upstream`` block of two loopback ports
where that DNS answer would be (nginx takes a variable's host from a block of that
name before asking the resolver); the ``proxy_next_upstream`` line is the shipped one.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support import JsonStub, missing_system_part, pid_alive

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "deploy" / "nginx.conf"


class StubShop(JsonStub):
    """``/status/<code>`` answers that status with a JSON error (and ``Retry-After`` on
    503); ``/slow`` answers after 3 s; anything else 200 with the body's length."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        found = re.fullmatch(r"/status/(\d+)", self.path)
        status = int(found.group(1)) if found else 200
        if self.path == "/slow":
            time.sleep(3)
        self.answer_json(status, {"error": "stub", "detail": f"status {status}",
                                  "received": length},
                         {"Retry-After": "1"} if status == 503 else None)

    do_GET = do_POST = do_PUT = _answer


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def adapted(conf: str, workdir: Path, scratch: Path, port: int,
            upstream: int | tuple[int, ...], read_timeout: str | None) -> str:
    """The shipped file with only the compose-network parts swapped for loopback ones.

    ``upstream``: one port, or several: then ``web`` is an ``upstream`` block of those
    ports in that order, as the replicas' addresses would be in Docker's DNS answer."""
    replicas = ""
    if isinstance(upstream, int):
        target = f"http://127.0.0.1:{upstream}"
    else:
        target = "http://web_replicas"
        servers = " ".join(f"server 127.0.0.1:{each};" for each in upstream)
        replicas = f"\n    upstream web_replicas {{ {servers} }}"
    swaps = [("listen 80;", f"listen 127.0.0.1:{port};"),
             ("http://web:8000", target),
             ("resolver 127.0.0.11 valid=5s ipv6=off;", "resolver 127.0.0.1;")]
    if read_timeout:
        swaps.append(("proxy_read_timeout 45s;", f"proxy_read_timeout {read_timeout};"))
    for old, new in swaps:
        assert old in conf, f"deploy/nginx.conf no longer has {old!r}: update this test"
        conf = conf.replace(old, new)
    temp = " ".join(f"{kind}_temp_path {scratch / kind};"
                    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = conf.replace("http {", "http {\n    " + temp + replicas, 1)
    return f"pid {workdir / 'nginx.pid'};\nerror_log {workdir / 'error.log'};\n" + conf


@pytest.fixture(scope="module")
def stub() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubShop)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@contextmanager
def run_nginx(tmp_path: Path, upstream: int | tuple[int, ...],
              read_timeout: str | None = None) -> Iterator[int]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.access(binary, os.X_OK):
        missing_system_part("nginx is not installed (Debian package nginx; make sysdeps)")
    # the workers (user nobody when we are root) buffer bodies in the temp dirs: a dir
    # they can reach (pytest's tmp_path sits under a 0700 dir), removed afterwards
    scratch = Path(tempfile.mkdtemp(prefix="seckill-nginx-"))
    scratch.chmod(0o777)
    try:
        with _nginx(binary, tmp_path, scratch, upstream, read_timeout) as port:
            yield port
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def _nginx(binary: str, tmp_path: Path, scratch: Path, upstream: int | tuple[int, ...],
           read_timeout: str | None) -> Iterator[int]:
    port = free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(adapted(CONF.read_text(), tmp_path, scratch, port, upstream,
                             read_timeout))
    checked = subprocess.run([binary, "-t", "-q", "-c", str(conf), "-p", str(tmp_path)],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    # -g "daemon off;": the master stays our child, stopped by its pid
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        master = subprocess.Popen([binary, "-c", str(conf), "-p", str(tmp_path),
                                   "-g", "daemon off;"], stderr=stderr)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert master.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "nginx did not listen within 10 s"
                time.sleep(0.05)
        yield port
    finally:
        master.send_signal(signal.SIGQUIT)
        try:
            master.wait(timeout=10)
        except subprocess.TimeoutExpired:
            master.kill()
            master.wait()
        assert not pid_alive(master.pid)


@pytest.fixture
def nginx(tmp_path: Path, stub: int) -> Iterator[int]:
    with run_nginx(tmp_path, stub) as port:
        yield port


def request(port: int, method: str, path: str, body: bytes | None = None,
            timeout: float = 15) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        connection.request(method, path, body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def assert_api_error(answer: tuple[int, dict[str, str], bytes], status: int) -> dict[str, str]:
    got, headers, body = answer
    assert got == status, body[:200]
    assert headers["content-type"].startswith("application/json"), body[:200]
    error: dict[str, str] = json.loads(body)
    assert set(error) >= {"error", "detail"} and error["detail"]
    return error


@pytest.mark.parametrize("status", [201, 400, 404, 409, 503])
def test_the_shops_answers_pass_through_untouched(nginx, status):
    answer = request(nginx, "POST", f"/status/{status}", b'{"user_id": "u"}')
    assert assert_api_error(answer, status)["error"] == "stub"
    if status == 503:
        assert answer[1]["retry-after"] == "1"


def test_a_body_the_shop_may_refuse_reaches_the_shop(nginx):
    # the shop's own limit is 64 KiB (413 JSON from the app): nginx lets 100 KB through
    status, _, body = request(nginx, "POST", "/api/products/sku-1/purchase", b"x" * 100_000)
    assert (status, json.loads(body)["received"]) == (200, 100_000)


def test_a_body_too_large_for_nginx_is_413_json(nginx):
    answer = request(nginx, "POST", "/api/products/sku-1/purchase", b"x" * 2_000_000)
    assert assert_api_error(answer, 413)["error"] == "request_entity_too_large"


def test_a_url_too_long_for_nginx_is_414_json(nginx):
    answer = request(nginx, "GET", "/api/products/" + "x" * 10_000)
    # the code the shop itself gives a URL too long (gunicorn's "URI Too Long")
    assert assert_api_error(answer, 414)["error"] == "uri_too_long"


@pytest.mark.parametrize("header", ["X-Big: " + "x" * 9_000, "Cookie: c=" + "x" * 9_000],
                         ids=["header", "cookie"])
def test_a_header_too_large_for_nginx_is_400_json(nginx, header):
    # nginx's "Request Header Or Cookie Too Large" is its own 494, which error_page 400
    # did not catch: an HTML page
    assert_bad_request_json(nginx, f"GET /api/products HTTP/1.1\r\nHost: x\r\n{header}\r\n"
                                   "Connection: close\r\n\r\n".encode())


def test_a_request_nginx_cannot_read_is_400_json(nginx):
    assert_bad_request_json(nginx, b"GET / HTTP/1.1\r\nHost: x\r\nBroken header line\r\n\r\n")


def assert_bad_request_json(port: int, sent: bytes) -> None:
    """Send ``sent`` as it is (http.client would refuse it) and expect nginx's own 400,
    as JSON."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(sent)
        reply = b""
        while chunk := raw.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"application/json" in head and json.loads(body)["error"] == "bad_request"


def test_a_replica_not_answering_is_502_json_with_retry_after(tmp_path):
    with run_nginx(tmp_path, free_port()) as port:  # nothing listens upstream
        answer = request(port, "POST", "/api/products/sku-1/purchase", b'{"user_id": "u"}')
        assert assert_api_error(answer, 502)["error"] == "bad_gateway"
        assert answer[1]["retry-after"] == "1"


def test_a_replica_too_slow_is_504_json_with_retry_after(tmp_path, stub):
    with run_nginx(tmp_path, stub, read_timeout="1s") as port:
        answer = request(port, "POST", "/slow", b'{"user_id": "u"}')
        assert assert_api_error(answer, 504)["error"] == "gateway_timeout"
        assert answer[1]["retry-after"] == "1"


class Replica(JsonStub):
    """One web replica that writes down every request it reads (method and path) before
    answering 201; a replica started with ``stall`` reads and writes down the request,
    then answers nothing until the test ends, as a replica stuck mid-purchase."""

    protocol_version = "HTTP/1.1"
    server: ReplicaServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.received.append(f"{self.command} {self.path}")
        if self.server.stall:
            self.server.released.wait(30)
            return
        self.answer_json(201, {"status": "created"})

    do_PUT = do_POST  # an admin reset


class ReplicaServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, stall: bool) -> None:
        super().__init__(("127.0.0.1", 0), Replica)
        self.stall = stall
        self.received: list[str] = []
        self.released = threading.Event()


@contextmanager
def replica(stall: bool = False) -> Iterator[ReplicaServer]:
    server = ReplicaServer(stall)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_post_to_a_replica_that_refuses_the_connection_goes_to_the_next(tmp_path):
    # a replica restarting (nothing listens on its port): nothing was sent, so trying the
    # next replica cannot make a second purchase. `proxy_next_upstream off` answered 502
    # instead (the first request of each nginx worker goes to the first address).
    dead = free_port()
    with replica() as live, run_nginx(tmp_path, (dead, live.server_address[1])) as port:
        paths = [f"/api/products/sku-1/purchase?attempt={n}" for n in range(6)]
        for path in paths:
            status, _, body = request(port, "POST", path, b'{"user_id": "u"}')
            assert status == 201, body[:200]
        assert sorted(live.received) == sorted(f"POST {path}" for path in paths)


@pytest.mark.parametrize("method, path, body", [
    # a purchase may be under way on the stuck replica: sending it to the other one too
    # would be a second purchase attempt the buyer never made. nginx passes a POST it
    # has sent to the next replica only with `non_idempotent`; the buyer hears 504 and
    # retries with the same Idempotency-Key.
    ("POST", "/api/products/sku-1/purchase", b'{"user_id": "u"}'),
    # a reset is a PUT, which nginx would pass on after a timeout (only POST, LOCK and
    # PATCH never are): the second reset would restock the sale and delete the orders
    # taken since the first (a review). /api/admin/ is never passed on.
    ("PUT", "/api/admin/sales/sku-1", b'{"stock": 5}'),
])
def test_a_request_a_replica_took_and_never_answered_is_not_sent_to_another(
        tmp_path, method, path, body):
    with replica(stall=True) as stuck, replica() as other, \
            run_nginx(tmp_path, (stuck.server_address[1], other.server_address[1]),
                      read_timeout="1s") as port:
        answer = request(port, method, path, body)
        assert assert_api_error(answer, 504)["error"] == "gateway_timeout"
        assert stuck.received == [f"{method} {path}"]
        assert other.received == []
