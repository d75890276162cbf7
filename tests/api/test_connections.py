"""Connection bounds on a real socket: a request head that never ends, a body that stalls.

The server is the service's own configuration (``serving.server_config``) with
short timeouts; each test waits for the server to act (the socket closing,
an answer arriving) under a generous bound of its own, never timing it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import requests
from sqlalchemy import update

from metalforge.db.models import Node
from tests.support.stack import LiveServer, serving, test_settings

WAIT = 20.0
"""The longest a test waits for the server to act (the timeouts under test are 0.5 s)."""


@pytest.fixture
def server(sqlite_url: str) -> Iterator[LiveServer]:
    settings = test_settings(sqlite_url)
    api = settings.api.model_copy(update={"header_timeout": 0.5, "body_timeout": 0.5})
    with serving(settings.model_copy(update={"api": api})) as live:
        yield live


def _connect(server: LiveServer) -> socket.socket:
    parts = urlsplit(server.url)
    conn = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80))
    conn.settimeout(WAIT)
    return conn


def _read_all(conn: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_a_request_head_that_never_ends_is_closed(server: LiveServer) -> None:
    with _connect(server) as conn:
        conn.sendall(b"GET /v1 HTTP/1.1\r\nHost: metalforge\r\n")
        assert _read_all(conn) == b""  # closed, nothing answered


def test_a_head_sent_a_byte_at_a_time_does_not_restart_the_clock(server: LiveServer) -> None:
    request = b"GET /v1 HTTP/1.1\r\nHost: metalforge\r\nX-Slow: " + b"a" * 200
    with _connect(server) as conn:
        closed = False
        for byte in request:
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.05)
        if not closed:
            conn.settimeout(WAIT)
            assert _read_all(conn) == b""


def test_a_silent_connection_is_closed(server: LiveServer) -> None:
    with _connect(server) as conn:
        assert _read_all(conn) == b""


def test_a_stalled_body_ends_the_request_with_408(server: LiveServer) -> None:
    head = (
        b"POST /v1/nodes HTTP/1.1\r\nHost: metalforge\r\nContent-Type: application/json\r\n"
        b"X-OpenStack-Ironic-API-Version: latest\r\nContent-Length: 100\r\n\r\n"
    )
    with _connect(server) as conn:
        conn.sendall(head + b'{"driver": ')
        answer = _read_all(conn)
    status_line, _, rest = answer.partition(b"\r\n")
    assert b" 408 " in status_line, answer[:300]
    body = json.loads(rest.split(b"\r\n\r\n", 1)[1])
    assert "did not arrive within" in json.loads(body["error_message"])["faultstring"]


def test_whole_requests_and_kept_alive_connections_still_work(server: LiveServer) -> None:
    with _connect(server) as conn:
        for _ in range(3):
            conn.sendall(b"GET /v1 HTTP/1.1\r\nHost: metalforge\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            assert head.startswith(b"HTTP/1.1 200"), head[:100]
            length = int(
                next(
                    line.split(b":", 1)[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
            )
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += conn.recv(65536)
            assert json.loads(body)["id"] == "v1"


def test_requests_waiting_on_a_locked_node_do_not_starve_others(sqlite_url: str) -> None:
    """Sixty PATCHes wait on a node another holder reserved (more than the API's worker
    threads); an unrelated read is answered while they all still wait, and they finish
    once the node is free."""
    settings = test_settings(sqlite_url)
    api = settings.api.model_copy(update={"lock_wait_seconds": 60.0})
    with serving(settings.model_copy(update={"api": api})) as live:
        headers = {"X-OpenStack-Ironic-API-Version": "latest"}
        node = requests.post(
            f"{live.url}/v1/nodes", json={"driver": "fake-hardware"}, headers=headers, timeout=WAIT
        ).json()
        with live.stack.db.write() as session:
            session.execute(
                update(Node).where(Node.uuid == node["uuid"]).values(reservation="elsewhere")
            )
        results: list[int] = []

        def patch(i: int) -> None:
            response = requests.patch(
                f"{live.url}/v1/nodes/{node['uuid']}",
                json=[{"op": "add", "path": f"/extra/k{i}", "value": i}],
                headers=headers,
                timeout=120,
            )
            results.append(response.status_code)

        waiters = [threading.Thread(target=patch, args=(i,)) for i in range(60)]
        for waiter in waiters:
            waiter.start()
        # The waiters are in: their attempts keep failing on the reservation meanwhile.
        read = requests.get(f"{live.url}/v1/nodes", headers=headers, timeout=WAIT)
        assert read.status_code == 200, read.text
        assert results == []  # answered while every PATCH still waits
        with live.stack.db.write() as session:
            session.execute(update(Node).where(Node.uuid == node["uuid"]).values(reservation=None))
        for waiter in waiters:
            waiter.join(120)
        assert results == [200] * 60
