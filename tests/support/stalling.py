"""Peers that never finish answering: a tenant's hostile BMC or image server, on 127.0.0.1.

``StallingServer`` accepts every connection and then, by ``mode``:

- ``silent``: reads the request and sends nothing, ever;
- ``trickle``: sends an HTTP 200 head and then one byte of body every
  ``interval`` seconds, never the end.

Each connection is served by a thread of its own until the server is
closed (or the peer hangs up), so the server never stops a test's exit:
``close()`` shuts every connection down.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Literal

Mode = Literal["silent", "trickle"]


class StallingServer:
    def __init__(self, mode: Mode, *, interval: float = 0.2, body_start: bytes = b"") -> None:
        self.mode = mode
        self.interval = interval
        self.body_start = body_start
        """Bytes the trickled body starts with (say, the magic of an ISO), then zeros."""
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self.accepted = 0
        """Connections accepted so far."""
        self._thread = threading.Thread(target=self._accept, name="stalling", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open_connections(self) -> int:
        """Connections the peer has not hung up on yet."""
        with self._lock:
            return sum(1 for c in self._connections if c.fileno() != -1)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._connections.append(conn)
                self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(self.interval)
            with contextlib.suppress(TimeoutError):
                conn.recv(65536)
            if self.mode == "trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
                sent = 0
                while not self._closed.wait(self.interval):
                    byte = self.body_start[sent : sent + 1] or b"\0"
                    conn.sendall(byte)
                    sent += 1
            else:
                while not self._closed.is_set():
                    try:
                        if conn.recv(65536) == b"":
                            return  # the peer hung up
                    except TimeoutError:
                        continue
        except OSError:
            return  # the peer cut the connection: what the test wanted
        finally:
            conn.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)


@contextlib.contextmanager
def stalling(
    mode: Mode, *, interval: float = 0.2, body_start: bytes = b""
) -> Iterator[StallingServer]:
    server = StallingServer(mode, interval=interval, body_start=body_start)
    try:
        yield server
    finally:
        server.close()
