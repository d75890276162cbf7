"""``/metrics`` on an address of its own, without credentials (``api.metrics_port``).

Prometheus can send a fixed Basic or bearer credential but cannot get a
Keystone token; and many operators keep scrapes on a management network
anyway. This port serves exactly the figures the guarded ``GET /metrics``
serves, and nothing else, from a small thread of its own, so it answers
even while the API's workers are busy. Bind it to a management address:
whoever reaches it reads the fleet's counts and the names of the conductor
and PXE filter hosts (never a node's name or a secret), and at most
``CONCURRENT_SCRAPES`` scrapes run at once.
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from metalforge.api.metrics_text import CONTENT_TYPE, render
from metalforge.services.context import Services
from metalforge.services.metrics import cluster_figures

LOG = logging.getLogger(__name__)


class MetricsPort:
    """A threaded HTTP server answering ``GET /metrics`` (and 404 to anything else)."""

    def __init__(self, svc: Services, host: str, port: int) -> None:
        handler = _handler(svc)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-port", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


CONCURRENT_SCRAPES = 2
"""Scrapes answered at once; more get 503 (each reads the database, and anyone who
reaches the port may ask)."""


def _handler(svc: Services) -> type[BaseHTTPRequestHandler]:
    scrapes = threading.BoundedSemaphore(CONCURRENT_SCRAPES)

    class Handler(BaseHTTPRequestHandler):
        server_version = "metalforge"
        sys_version = ""

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._answer(404, b"Not found: this port serves /metrics only\n", "text/plain")
                return
            if not scrapes.acquire(blocking=False):
                self._answer(503, b"Too many scrapes at once\n", "text/plain")
                return
            try:
                body = render(cluster_figures(svc))
            except Exception:  # a scrape gets a 503, not a dropped connection
                LOG.exception("could not read the cluster's figures for a scrape")
                self._answer(503, b"The figures cannot be read now\n", "text/plain")
                return
            finally:
                scrapes.release()
            self._answer(200, body, CONTENT_TYPE)

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # scrapes every few seconds would drown the log

    return Handler
