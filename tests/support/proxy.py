"""A TCP proxy a test can cut: the network partition between a service and its database.

``cut()`` drops every open connection and refuses new ones until ``heal()``,
the way a partition looks to the client; the server behind stays up.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttableProxy:
    """Forwards 127.0.0.1:``port`` to ``target``; start with ``start`` and end with ``stop``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = False
        self._stopped = False

    def start(self) -> None:
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut or self._stopped:
                    client.close()  # refused as an unreachable host would be
                    continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                # A cut while this connected must drop this pair too.
                dropped = self._cut or self._stopped
                if not dropped:
                    self._open.update((client, server))
            if dropped:
                client.close()
                server.close()
                continue
            for source, sink in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._close(source)
            self._close(sink)

    def _close(self, connection: socket.socket) -> None:
        with self._lock:
            self._open.discard(connection)
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            connection.close()

    def cut(self) -> None:
        """Drop every connection and refuse new ones."""
        with self._lock:
            self._cut = True
            connections = list(self._open)
        for connection in connections:
            self._close(connection)

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.cut()
