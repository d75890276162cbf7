"""``GET /v1/events``: node changes as server-sent events, filtered and scoped per caller."""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from sqlalchemy import update

from metalforge.db.models import Node
from metalforge.db.models import NodeEvent as NodeEventRow
from tests.support.api import LATEST, create_node, provision, wait_for_state, wait_until
from tests.support.auth import (
    ADMIN,
    LESSEE_MEMBER,
    NO_ROLE,
    OWNER_MEMBER,
    OWNER_READER,
    basic_auth_settings,
)
from tests.support.stack import LiveServer, serving


@dataclass
class Event:
    id: int
    kind: str
    data: dict[str, Any]


class Stream:
    """A client reading the stream in a thread; tests wait for events from it.

    Plain ``http.client`` over a socket the test owns, so closing it (a
    client going away) unblocks the reading thread at once.
    """

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.events: queue.Queue[Event | BaseException] = queue.Queue()
        self.status: int | None = None
        self.content_type = ""
        self.ready_id: int | None = None
        self.opened = threading.Event()
        """Set once the server said the stream is subscribed (``ready``), or it failed."""
        parts = urlsplit(url)
        assert parts.hostname is not None, url
        self._connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        self._path = f"{parts.path}?{parts.query}" if parts.query else parts.path
        self._headers = headers
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        assert self.opened.wait(15), "the stream did not open"

    def _read(self) -> None:
        try:
            self._connection.request("GET", self._path, headers=self._headers)
            response = self._connection.getresponse()
            self.status = response.status
            self.content_type = response.getheader("content-type", "")
            if self.status != 200:
                self.opened.set()
                return
            assert self._connection.sock is not None
            self._connection.sock.settimeout(None)
            fields: dict[str, str] = {}
            while True:
                raw = response.readline()
                if not raw:
                    raise EOFError("the server ended the stream")
                line = raw.decode().rstrip("\r\n")
                if line == "":
                    if fields.get("event") == "ready":
                        self.ready_id = int(fields["id"])
                        self.opened.set()  # subscribed: nothing after this is missed
                    elif "event" in fields:
                        data = json.loads(fields["data"])
                        self.events.put(Event(int(fields["id"]), fields["event"], data))
                    fields = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
        except BaseException as exc:  # noqa: BLE001 - closed by the test, or a failure to report
            self.opened.set()
            self.events.put(exc)

    def wait_for(self, what: str, match: Any, timeout: float = 20.0) -> Event:
        while True:
            try:
                item = self.events.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no event: {what}") from None
            if isinstance(item, BaseException):
                raise AssertionError(f"the stream failed waiting for {what}") from item
            if match(item):
                return item

    def close(self) -> None:
        sock = self._connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._connection.close()
        self._thread.join(10)


@pytest.fixture
def streams(live_server: LiveServer) -> Iterator[list[Stream]]:
    opened: list[Stream] = []
    yield opened
    for stream in opened:
        stream.close()


def _open(
    server: LiveServer, streams: list[Stream], path: str = "/v1/events", **headers: str
) -> Stream:
    stream = Stream(server.url + path, {**LATEST, **headers})
    streams.append(stream)
    return stream


def test_a_node_moving_through_manage_is_streamed_with_its_state(
    live_server: LiveServer, streams: list[Stream]
) -> None:
    client = live_server.stack.client
    stream = _open(live_server, streams)
    assert stream.status == 200
    assert stream.content_type.startswith("text/event-stream")
    node = create_node(client, name="streamed")
    enrolled = stream.wait_for(
        "the new node", lambda e: e.kind == "node" and e.data["uuid"] == node["uuid"]
    )
    assert enrolled.data["provision_state"] == "enroll"
    assert enrolled.data["name"] == "streamed"
    assert "driver_info" not in enrolled.data  # nothing secret travels in events
    assert provision(client, node["uuid"], "manage").status_code == 202
    wait_for_state(client, node["uuid"], "manageable")
    managed = stream.wait_for("manageable", lambda e: e.data.get("provision_state") == "manageable")
    assert managed.id > enrolled.id
    assert managed.data["progress"]["flow"] is None


def test_the_node_filter_and_deletion(live_server: LiveServer, streams: list[Stream]) -> None:
    client = live_server.stack.client
    watched = create_node(client, name="watched")
    stream = _open(live_server, streams, "/v1/events?node=watched")
    create_node(client, name="other")
    assert (
        client.patch(
            "/v1/nodes/watched",
            json=[{"op": "add", "path": "/extra/x", "value": 1}],
            headers=LATEST,
        ).status_code
        == 200
    )
    assert (
        client.put(
            "/v1/nodes/watched/maintenance", json={"reason": "disk swap"}, headers=LATEST
        ).status_code
        == 202
    )
    event = stream.wait_for("maintenance", lambda e: e.kind == "node")
    assert event.data["uuid"] == watched["uuid"]
    assert event.data["maintenance"] is True
    assert event.data["maintenance_reason"] == "disk swap"
    assert client.delete("/v1/nodes/watched", headers=LATEST).status_code == 204
    gone = stream.wait_for("the deletion", lambda e: e.kind == "node_deleted")
    assert gone.data == {"uuid": watched["uuid"]}


def test_a_client_that_reconnects_gets_what_it_missed(
    live_server: LiveServer, streams: list[Stream]
) -> None:
    client = live_server.stack.client
    first = create_node(client, name="before")
    stream = _open(live_server, streams)
    create_node(client, name="missed")
    event = stream.wait_for("missed", lambda e: e.data.get("name") == "missed")
    stream.close()
    create_node(client, name="while-away")
    again = _open(live_server, streams, **{"Last-Event-ID": str(event.id)})
    caught_up = again.wait_for("while-away", lambda e: e.data.get("name") == "while-away")
    assert caught_up.id > event.id
    assert first["uuid"]  # enrolled before: not sent again after the id


def test_a_client_too_far_behind_is_told_to_resync(
    live_server: LiveServer, streams: list[Stream]
) -> None:
    client = live_server.stack.client
    create_node(client, name="a")
    create_node(client, name="b")
    with live_server.stack.db.write() as session:  # as if retention had pruned them
        session.query(NodeEventRow).filter(NodeEventRow.id <= 1).delete()
    stream = _open(live_server, streams, **{"Last-Event-ID": "0"})
    assert stream.wait_for("resync", lambda e: True).kind == "resync"


@pytest.mark.parametrize("bad", ["abc", "-1", "1" * 30])
def test_a_bad_last_event_id_is_400(live_server: LiveServer, bad: str) -> None:
    response = live_server.stack.client.get("/v1/events", headers={**LATEST, "Last-Event-ID": bad})
    assert response.status_code == 400
    assert "Last-Event-ID" in response.json()["error_message"]


def test_an_unknown_node_filter_is_404(live_server: LiveServer) -> None:
    response = live_server.stack.client.get("/v1/events?node=none-such", headers=LATEST)
    assert response.status_code == 404


@pytest.fixture
def scoped_server(tmp_path: Path) -> Iterator[LiveServer]:
    with serving(basic_auth_settings(f"sqlite:///{tmp_path}/mf.sqlite", tmp_path)) as server:
        yield server


def test_a_project_sees_only_its_nodes_and_only_the_fields_its_rules_show(
    scoped_server: LiveServer, streams: list[Stream]
) -> None:
    client = scoped_server.stack.client
    owner = _open(scoped_server, streams, **OWNER_READER.headers)
    lessee = _open(scoped_server, streams, **LESSEE_MEMBER.headers)
    admin = _open(scoped_server, streams, **ADMIN.headers)
    for name, fields in (
        ("leased", {"owner": "p-owner", "lessee": "p-lessee"}),
        ("foreign", {"owner": "p-other"}),
    ):
        response = client.post(
            "/v1/nodes",
            json={"driver": "fake-hardware", "name": name, **fields},
            headers=ADMIN.headers,
        )
        assert response.status_code == 201, response.text
    with scoped_server.stack.db.write() as session:
        session.execute(update(Node).where(Node.name == "leased").values(last_error="BMC said no"))
        session.execute(update(Node).where(Node.name == "foreign").values(last_error="x"))
    admin.wait_for(
        "foreign's error", lambda e: e.data.get("name") == "foreign" and e.data["last_error"]
    )
    seen_by_owner = owner.wait_for(
        "leased's error", lambda e: e.data.get("name") == "leased" and e.data["last_error"]
    )
    assert seen_by_owner.data["last_error"] == "BMC said no"
    seen_by_lessee = lessee.wait_for(
        "leased's error", lambda e: e.data.get("name") == "leased" and e.data["last_error"]
    )
    assert "Redacted" in seen_by_lessee.data["last_error"]
    # The foreign node's events went to the administrator only: up to a later change
    # of their own node, the project clients get nothing of it.
    response = client.put(
        "/v1/nodes/leased/maintenance", json={"reason": "r"}, headers=ADMIN.headers
    )
    assert response.status_code == 202
    for stream in (owner, lessee):
        names: list[str] = []

        def in_maintenance(event: Event, names: list[str] = names) -> bool:
            names.append(event.data.get("name", ""))
            return event.data.get("maintenance") is True

        stream.wait_for("leased in maintenance", in_maintenance)
        assert set(names) == {"leased"}, names


def test_a_node_another_project_owns_cannot_be_streamed(
    scoped_server: LiveServer,
) -> None:
    client = scoped_server.stack.client
    response = client.post(
        "/v1/nodes",
        json={"driver": "fake-hardware", "name": "theirs", "owner": "p-other"},
        headers=ADMIN.headers,
    )
    assert response.status_code == 201
    refused = client.get("/v1/events?node=theirs", headers=OWNER_READER.headers)
    assert refused.status_code == 404
    assert client.get("/v1/events", headers=NO_ROLE.headers).status_code == 403
    assert client.get("/v1/events").status_code == 401


def test_streams_end_when_the_server_stops(live_server: LiveServer, streams: list[Stream]) -> None:
    stream = _open(live_server, streams)
    assert stream.status == 200
    live_server.stop()
    assert not live_server.thread.is_alive(), "an open stream held the server's shutdown"
    with pytest.raises(AssertionError, match="stream failed"):
        stream.wait_for("the end of the stream", lambda e: False, timeout=10)


def test_a_followed_node_given_to_another_project_is_no_longer_shown(
    scoped_server: LiveServer, streams: list[Stream]
) -> None:
    client = scoped_server.stack.client
    response = client.post(
        "/v1/nodes",
        json={"driver": "fake-hardware", "name": "handed-over", "owner": "p-owner"},
        headers=ADMIN.headers,
    )
    assert response.status_code == 201, response.text
    follower = _open(scoped_server, streams, "/v1/events?node=handed-over", **OWNER_READER.headers)
    admin = _open(scoped_server, streams, **ADMIN.headers)

    def patch(path: str, value: str) -> None:
        ops = [{"op": "replace", "path": path, "value": value}]
        answer = client.patch("/v1/nodes/handed-over", json=ops, headers=ADMIN.headers)
        assert answer.status_code == 200, answer.text

    patch("/owner", "p-other")
    patch("/resource_class", "theirs-now")
    # The reader hands each batch to every subscriber at once: once the administrator
    # has the foreign state, the follower was offered it too.
    admin.wait_for("the foreign state", lambda e: e.data.get("resource_class") == "theirs-now")
    patch("/owner", "p-owner")
    patch("/resource_class", "ours-again")
    seen: list[dict[str, Any]] = []

    def back(event: Event) -> bool:
        seen.append(event.data)
        return event.data.get("resource_class") == "ours-again"

    follower.wait_for("the node back in its project", back)
    assert all(data.get("owner") == "p-owner" for data in seen), seen


def test_a_stream_ends_after_its_lifetime(tmp_path: Path, streams: list[Stream]) -> None:
    settings = basic_auth_settings(
        f"sqlite:///{tmp_path}/mf.sqlite", tmp_path, event_stream_lifetime=1.0
    )
    with serving(settings) as server:
        stream = _open(server, streams, **ADMIN.headers)
        assert stream.ready_id is not None
        # The server ends it (the client reconnects, its credentials checked again).
        with pytest.raises(AssertionError, match="stream failed"):
            stream.wait_for("the end of the stream", lambda e: False, timeout=30)
        stream.close()


def test_one_caller_cannot_take_every_stream(tmp_path: Path, streams: list[Stream]) -> None:
    settings = basic_auth_settings(
        f"sqlite:///{tmp_path}/mf.sqlite", tmp_path, max_event_streams_per_caller=2
    )
    with serving(settings) as server:
        held = [_open(server, streams, **OWNER_READER.headers) for _ in range(2)]
        assert all(s.ready_id is not None for s in held)
        # Another user of the same project draws on the same share.
        refused = _open(server, streams, **OWNER_MEMBER.headers)
        assert refused.status == 503
        other = _open(server, streams, **LESSEE_MEMBER.headers)
        assert other.ready_id is not None, "another project still gets its streams"
        held[0].close()

        def reopened() -> bool:
            again = _open(server, streams, **OWNER_MEMBER.headers)
            return again.status == 200

        wait_until("a stream of the project's share freed", reopened)
