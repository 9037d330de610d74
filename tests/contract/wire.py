"""A deliberately dumb HTTP client: the outside user of the contract.

``http.client`` sends exactly what it is given (odd headers, raw bytes), and
``raw_exchange`` speaks bytes on a socket for requests no client library would send.
Every answer is checked against the contract's error shape in one place,
``assert_error``.
"""

from __future__ import annotations

import http.client
import json
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    raw_headers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


def request(base_url: str, method: str, path: str, body: Any = None, *,
            raw: bytes | None = None, headers: dict[str, str] | None = None,
            timeout: float = 30.0) -> Answer:
    """One request on a fresh connection; ``body`` is sent as JSON unless ``raw`` is given."""
    parts = urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    sent = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    try:
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        payload = response.read()
        pairs = response.getheaders()
    finally:
        connection.close()
    return Answer(response.status, {k.lower(): v for k, v in pairs}, payload, pairs)


def raw_exchange(base_url: str, data: bytes, timeout: float = 10.0) -> Answer:
    """Send ``data`` as is and parse whatever comes back (status, headers, body)."""
    parts = urlsplit(base_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    reply = b"".join(chunks)
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    pairs = [(name.strip(), value.strip())
             for name, _, value in (line.partition(":") for line in lines[1:] if ":" in line)]
    return Answer(status, {k.lower(): v for k, v in pairs}, body, pairs)


def assert_error(answer: Answer, status: int, code: str | None = None) -> dict[str, Any]:
    """The contract: ``{"error": CODE, "detail": TEXT}`` as JSON, never HTML; ``busy`` says
    when to come back (``Retry-After``)."""
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.content_type.startswith("application/json"), (answer.content_type,
                                                                answer.body[:300])
    body = answer.json
    assert isinstance(body, dict) and isinstance(body.get("error"), str) \
        and isinstance(body.get("detail"), str), body
    if code is not None:
        assert body["error"] == code, body
    if body["error"] == "busy":
        assert int(answer.headers["retry-after"]) >= 0, answer.headers
    return body
