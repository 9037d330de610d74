"""Clients that hold or flood a served (gevent) shop, from a security audit: a request
whose body never finishes arriving held its connection for ever (a few thousand held
every slot); a flood of malformed requests wrote a ~4 KB log line each, and rotated the
whole kept log away."""

from __future__ import annotations

import json
import socket
import time

import pytest

from webapp.serve import ServedApp
from webapp.validation import BODY_S

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def app():
    with ServedApp(workers=1) as served:
        yield served


def test_a_flood_of_malformed_requests_is_a_line_a_minute_in_the_log(app):
    for _ in range(40):
        with socket.create_connection((app.host, app.port), timeout=10) as conn:
            conn.sendall(b"GARBAGE" + b"x" * 3000 + b" / HTTP/1.1\r\n\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 400")
    time.sleep(0.5)
    log = app.logfile.read_text(errors="replace")
    assert log.count("Invalid request from ip=") == 1, log[-3000:]
    assert max(len(line) for line in log.splitlines()) < 1000


def _answer_within(conn: socket.socket) -> tuple[bytes, float]:
    """The whole answer on ``conn`` and how long it took, once the server closed it."""
    started, answer = time.monotonic(), b""
    while chunk := conn.recv(4096):  # the server closes it after the 408: read to EOF
        answer += chunk
    return answer, time.monotonic() - started


CHUNKED_64K = (b"POST /api/products/sku-1/purchase HTTP/1.1\r\nHost: x\r\n"
               b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"10000\r\n" + b"x" * 65536 + b"\r\n")


@pytest.mark.parametrize("request_bytes", [
    b"POST /api/products/sku-1/purchase HTTP/1.1\r\nHost: x\r\n"
    b"Content-Type: application/json\r\nContent-Length: 30\r\n\r\n{",
    CHUNKED_64K,  # the limit's worth, then silence: its look past the limit waited (a review)
], ids=["one-byte-of-30", "chunked-64k-then-silence"])
def test_a_body_that_never_finishes_arriving_is_a_408(app, request_bytes):
    with socket.create_connection((app.host, app.port), timeout=BODY_S + 15) as conn:
        conn.sendall(request_bytes)
        answer, waited = _answer_within(conn)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(body)["error"] == "request_timeout"
    assert BODY_S - 1 < waited < BODY_S + 10, waited
