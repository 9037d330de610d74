"""A TCP proxy on loopback that can go silent: while ``silent``, it keeps every
connection open and accepts what is sent (the kernel acknowledges it) but passes
nothing on, in either direction. That is a database host or backend that has frozen
with its network up: no error, no answer. ``delay`` holds each new connection that
long before it is passed on, as a network's round trips hold a connect and its
handshake. ``hold_commit`` armed, the next COMMIT a client sends is held, not passed on,
until ``release`` is set: one backend stuck in its COMMIT (its transaction open, its row
locks held) while the others answer. Threads, stopped by ``close``."""

from __future__ import annotations

import socket
import threading

from lockcore.embedded import free_port


class SilentProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", *,
                 delay: float = 0.0) -> None:
        self.target = (target_host, target_port)
        self.delay = delay
        self.port = free_port()
        self.silent = threading.Event()
        self.hold_commit = threading.Event()
        self.holding = threading.Event()  # a COMMIT is being held
        self.release = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:  # the 0.2 s timeout, or closed
                continue
            self._closed.wait(self.delay)
            upstream = socket.create_connection(self.target, timeout=5)
            for sock in (client, upstream):
                sock.settimeout(0.2)
                self._sockets.append(sock)
            for source, sink, from_client in ((client, upstream, True),
                                              (upstream, client, False)):
                pump = threading.Thread(target=self._pump, args=(source, sink, from_client),
                                        daemon=True)
                pump.start()
                self._threads.append(pump)

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        while not self._closed.is_set():
            if self.silent.is_set():  # read nothing: it queues in the kernel
                self._closed.wait(0.05)
                continue
            try:
                data = source.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            if from_client and b"COMMIT\x00" in data and self.hold_commit.is_set():
                self.hold_commit.clear()
                self.holding.set()
                while not (self.release.wait(0.05) or self._closed.is_set()):
                    pass
            try:
                sink.sendall(data)
            except OSError:
                break
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._closed.set()
        self.release.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=2)
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> SilentProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
