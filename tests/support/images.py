"""Deploy images that pass for what they claim (a kernel, a ramdisk), and a server that
counts what it is asked for."""

from __future__ import annotations

import gzip
import http.server
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


def kernel_bytes(size: int = 64 * 1024) -> bytes:
    """An x86 bzImage as far as its header goes: ``MZ``, and ``HdrS`` at 0x202."""
    image = bytearray(size)
    image[0:2] = b"MZ"
    image[0x202:0x206] = b"HdrS"
    image[0x300:0x310] = b"metalforge-test!"
    return bytes(image)


def ramdisk_bytes() -> bytes:
    """A gzip-compressed cpio archive holding one file (``newc``, as initramfs are)."""
    name = b"init\0"
    body = b"#!/bin/sh\necho hello\n"
    header = b"070701" + b"".join(
        f"{value:08x}".encode()
        for value in (1, 0o100755, 0, 0, 1, 0, len(body), 0, 0, 0, 0, len(name), 0)
    )
    archive = header + name + b"\0" * ((4 - (len(header) + len(name)) % 4) % 4) + body
    trailer_name = b"TRAILER!!!\0"
    trailer = b"070701" + b"".join(
        f"{value:08x}".encode() for value in (0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, len(trailer_name), 0)
    )
    archive += b"\0" * ((4 - len(archive) % 4) % 4) + trailer + trailer_name
    return gzip.compress(archive, mtime=0)  # the same bytes in every process


@dataclass
class ImageServer:
    """An HTTP server of ``files`` (path -> bytes) on 127.0.0.1; counts the GETs per path."""

    files: dict[str, bytes]
    url: str = ""
    requests: Counter[str] = field(default_factory=Counter)
    gate: threading.Event = field(default_factory=threading.Event)
    """Cleared, the server holds every answer until it is set (to see a fetch under way)."""


@contextmanager
def image_server(files: dict[str, bytes]) -> Iterator[ImageServer]:
    served = ImageServer(files)
    served.gate.set()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests[self.path] += 1
            served.gate.wait(30)
            body = served.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield served
    finally:
        served.gate.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
