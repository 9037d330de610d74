"""A loopback TCP relay whose link the failover lab can cut on cue.

Replication between a Redis primary and its replica is asynchronous: the primary
answers ``OK`` to the client and ships the write to the replica a moment later. A crash
inside that moment loses the write on the replica, but the moment is a few hundred
microseconds wide, far too narrow to hit on demand. So the replica replicates *through*
this relay, and the lab calls ``cut()`` to hold the link down for as long as it needs:
the same loss, made deterministic.

``cut()`` closes every relayed connection and refuses new ones (the replica sees its
primary vanish and keeps retrying); ``mend()`` accepts them again.
"""

from __future__ import annotations

import logging
import socket
import threading

logger = logging.getLogger(__name__)


class Relay:
    """Forward ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>`` until cut."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._guard = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, name="relay", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """Drop every relayed connection now and refuse new ones until ``mend()``."""
        self._open.clear()
        self._drop_all()
        logger.info("relay :%d -> :%d cut", self.port, self.target_port)

    def mend(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closing.set()
        self._drop_all()
        self._thread.join(timeout=2)
        self._listener.close()

    def _drop_all(self) -> None:
        with self._guard:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept_loop(self) -> None:
        while not self._closing.is_set():
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set():
                downstream.close()  # the link is down: the replica's connect fails
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            downstream.settimeout(None)
            with self._guard:
                self._sockets += [downstream, upstream]
            for src, dst in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
