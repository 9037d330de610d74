"""A request whose body never finishes arriving is answered 408 and let go of, in a
served (gevent) shop: it held its connection for ever, and a few thousand such held
every slot (a security audit)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from webapp.serve import ServedApp
from webapp.validation import BODY_S

pytestmark = pytest.mark.timeout(120)


def test_a_body_that_never_finishes_arriving_is_a_408():
    with ServedApp(workers=1) as app:
        host, port = app.host, app.port
        with socket.create_connection((host, port), timeout=BODY_S + 15) as conn:
            conn.sendall(b"POST /api/products/sku-1/purchase HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 30\r\n\r\n{")
            started = time.monotonic()
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                answer += chunk
            waited = time.monotonic() - started
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), answer
        assert json.loads(body)["error"] == "request_timeout"
        assert BODY_S - 1 < waited < BODY_S + 10, waited
