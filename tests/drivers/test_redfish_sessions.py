"""Redfish sessions are reused, and logged out when a client is dropped or the process stops.

The emulator (sushy-tools) has no SessionService, so sushy falls back to
Basic auth there. The BMC here is the smallest Redfish service with one:
it hands out a session on ``POST`` and records each ``DELETE``, which is
all the client under test does with sessions.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from metalforge.drivers.redfish.connection import CONNECTIONS, parse_driver_info
from tests.support.api import wait_until

SESSIONS = "/redfish/v1/SessionService/Sessions"


@dataclass
class SessionBmc:
    url: str
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def _handler(bmc: SessionBmc) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(
            self, status: int, body: Any = None, headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/redfish/v1":
                self._answer(
                    200,
                    {
                        "@odata.id": "/redfish/v1/",
                        "Id": "RootService",
                        "RedfishVersion": "1.6.0",
                        "UUID": "5b0f6d34-0000-4000-8000-000000000001",
                        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
                        "Links": {"Sessions": {"@odata.id": SESSIONS}},
                    },
                )
            else:
                self._answer(404, {"error": {"message": "not here"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if self.path != SESSIONS:
                self._answer(404, {"error": {"message": "not here"}})
                return
            ident = f"{SESSIONS}/{len(bmc.created) + 1}"
            bmc.created.append(ident)
            headers = {"X-Auth-Token": f"token-{len(bmc.created)}", "Location": ident}
            self._answer(201, {"@odata.id": ident}, headers)

        def do_DELETE(self) -> None:
            bmc.deleted.append(self.path)
            self._answer(204)

    return Handler


@pytest.fixture
def bmc() -> Iterator[SessionBmc]:
    holder = SessionBmc("")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(holder))
    holder.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder
    finally:
        server.shutdown()
        server.server_close()
        CONNECTIONS.clear()


def test_one_session_per_bmc_is_reused_and_logged_out_when_dropped(bmc: SessionBmc) -> None:
    info = parse_driver_info(
        {"redfish_address": bmc.url, "redfish_username": "u", "redfish_password": "p"}
    )
    first = CONNECTIONS.client(info)
    assert CONNECTIONS.client(info) is first
    assert bmc.created == [f"{SESSIONS}/1"], "one session, reused"
    CONNECTIONS.forget(info)
    wait_until("the session's logout", lambda: bmc.deleted == [f"{SESSIONS}/1"])


def test_a_stopping_process_logs_every_session_out_before_it_ends(bmc: SessionBmc) -> None:
    for user in ("a", "b"):
        info = parse_driver_info(
            {"redfish_address": bmc.url, "redfish_username": user, "redfish_password": "p"}
        )
        CONNECTIONS.client(info)
    assert len(bmc.created) == 2
    CONNECTIONS.close_all(timeout=10)
    assert sorted(bmc.deleted) == sorted(bmc.created), "waited for, not left to a thread"
