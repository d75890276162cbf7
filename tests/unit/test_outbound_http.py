"""Whole-call deadlines cut a peer that never finishes answering, on real sockets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from metalforge import outbound_http
from tests.support.images import image_server
from tests.support.stalling import stalling

pytestmark = pytest.mark.timeout(60)

READ_TIMEOUT = 300.0
"""Longer than the test's own timeout: only the deadline can end these calls."""


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_a_peer_that_never_finishes_is_cut_at_the_deadline(mode: str) -> None:
    with stalling(mode) as peer, outbound_http.session() as session:  # type: ignore[arg-type]
        with (
            outbound_http.within(0.5, "test") as deadline,
            pytest.raises(requests.RequestException),
        ):
            session.get(peer.url, timeout=(5, READ_TIMEOUT)).content  # noqa: B018
        assert deadline.expired
        assert peer.accepted == 1


def test_retries_after_the_deadline_are_cut_as_they_connect() -> None:
    with stalling("silent") as peer, outbound_http.session() as session:
        with outbound_http.within(0.3, "test") as deadline:
            for _ in range(3):
                with pytest.raises(requests.ConnectionError):
                    session.get(peer.url, timeout=(5, READ_TIMEOUT))
            assert outbound_http.expired()
        assert deadline.expired
        assert not outbound_http.expired(), "outside the block no deadline applies"


@pytest.fixture
def answering() -> Iterator[str]:
    with image_server({"/": b"hello"}) as served:
        yield f"{served.url}/"


def test_a_call_that_ends_in_time_is_untouched_and_leaves_nothing_watched(answering: str) -> None:
    with outbound_http.session() as session:
        with outbound_http.within(30, "test") as deadline:
            assert session.get(answering, timeout=5).text == "hello"
            assert session.get(answering, timeout=5).text == "hello"
        assert deadline.ended
        assert not deadline.expired
        assert deadline.sockets == [], "the descriptors kept to cut are closed with the block"
        assert session.get(answering, timeout=5).text == "hello"


def test_an_inner_block_never_extends_the_outer_deadline() -> None:
    with outbound_http.within(5, "test") as outer:
        with outbound_http.within(60, "test") as inner:
            assert inner is outer
        with outbound_http.within(1, "test") as shorter:
            assert shorter is not outer
            assert outbound_http.current() is shorter
        assert outbound_http.current() is outer
    assert outbound_http.current() is None
