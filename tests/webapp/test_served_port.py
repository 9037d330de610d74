"""``ServedApp`` serves where it says, or says why not: its port checked as gunicorn
binds it, a port picked free where it binds, and the health check that prints the
banner answered by its own gunicorn, not by a server that already held the URL."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from tests.support import JsonStub
from webapp import served as served_module
from webapp.served import ServedApp, StartupError, check_port_free


@pytest.fixture
def taken_ipv4_port() -> Iterator[int]:
    """A port something listens on at 127.0.0.1 (and not at ::1)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_localhost_is_checked_on_ipv4_as_gunicorn_binds_it(monkeypatch, taken_ipv4_port):
    # /etc/hosts listing ::1 first: the check probed [::1]:port and passed, though
    # gunicorn binds "localhost" with IPv4 (an IPv6 address alone gets IPv6), where the
    # port was taken
    real = socket.getaddrinfo

    def ipv6_first(host, port, family=0, type=0, proto=0, flags=0):
        if host != "localhost":
            return real(host, port, family, type, proto, flags)
        answers = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
                   (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return [a for a in answers if family in (0, a[0])]

    monkeypatch.setattr(socket, "getaddrinfo", ipv6_first)
    with pytest.raises(StartupError, match="in use"):
        check_port_free("localhost", taken_ipv4_port)


class _OtherShop(JsonStub):
    """Another server's ``/healthz``: 200, as a shop of its own would answer."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.answer_json(200, {"database": "ok", "redis": "ok"})


def test_the_health_check_does_not_take_another_server_for_its_own():
    # whatever answered /healthz with 200 at the URL was taken for the shop just
    # started, and the banner printed an admin token that server did not accept
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OtherShop)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    app = ServedApp(port=other.server_address[1], startup_timeout=10)
    app.proc = subprocess.Popen(["sleep", "30"])  # a gunicorn still coming up
    try:
        with pytest.raises(StartupError, match="another server answers"):
            app._wait_healthy()
    finally:
        app.proc.kill()
        app.proc.wait()
        app.proc = None
        other.shutdown()
        other.server_close()


def test_a_picked_port_is_free_where_gunicorn_binds(monkeypatch, redis_url, tmp_path):
    # --port 0 picked a port free on 127.0.0.1 whatever the host: on another address
    # it could be taken, and gunicorn failed to bind it
    with socket.socket() as elsewhere:
        elsewhere.bind(("127.0.0.2", 0))
        elsewhere.listen()
        taken = elsewhere.getsockname()[1]
        monkeypatch.setattr(served_module, "free_port", lambda: taken)  # free on .1
        app = ServedApp(host="127.0.0.2", workers=1, redis_url=redis_url,
                        database_url=f"sqlite:///{tmp_path / 'shop.sqlite'}",
                        redlock_urls=[], startup_timeout=30)
        with app:
            assert app.port != taken and app.url.startswith("http://127.0.0.2:")
