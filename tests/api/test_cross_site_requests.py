"""A page on another site cannot act with the credentials a browser holds for metalforge,
and a password guesser is slowed down.

The browser sends a cached http_basic login with every request; what such a
page can send is an HTML form's POST, with no header of its own choosing.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.support.api import error_text
from tests.support.auth import ADMIN, basic_auth_settings
from tests.support.stack import Stack, start_stack

BASIC_ONLY = {"Authorization": ADMIN.headers["Authorization"]}
"""What a browser adds by itself to any request to a site it has logged in to."""


@pytest.fixture
def basic_stack(tmp_path: Path) -> Iterator[Stack]:
    stack = start_stack(basic_auth_settings(f"sqlite:///{tmp_path}/mf.sqlite", tmp_path))
    try:
        yield stack
    finally:
        stack.stop()


@pytest.mark.parametrize("verb", ["pause", "resume", "abort"])
def test_a_form_s_post_with_the_browser_s_login_is_refused(basic_stack: Stack, verb: str) -> None:
    form = {**BASIC_ONLY, "Content-Type": "application/x-www-form-urlencoded"}
    refused = basic_stack.client.post(f"/v1/rollouts/r1/{verb}", headers=form, content=b"a=b")
    assert refused.status_code == 415, refused.text
    assert "could come from another site's page" in error_text(refused)
    # The same request as a client sends it reaches the route (no such rollout here).
    found = basic_stack.client.post(f"/v1/rollouts/r1/{verb}", headers=ADMIN.headers)
    assert found.status_code == 404, found.text


def test_a_foreign_origin_is_refused_and_changes_nothing(basic_stack: Stack) -> None:
    client = basic_stack.client
    evil = {**ADMIN.headers, "Origin": "https://evil.example"}
    refused = client.post("/v1/nodes", json={"driver": "fake-hardware", "name": "n"}, headers=evil)
    assert refused.status_code == 403, refused.text
    assert error_text(refused) == (
        "Cross-site request refused: origin 'https://evil.example' is not this service."
    )
    assert client.get("/v1/nodes", headers=ADMIN.headers).json()["nodes"] == []
    same = {**ADMIN.headers, "Origin": str(client.base_url).rstrip("/")}
    made = client.post("/v1/nodes", json={"driver": "fake-hardware", "name": "n"}, headers=same)
    assert made.status_code == 201, made.text


def test_failed_logins_are_throttled_per_address_and_user(basic_stack: Stack) -> None:
    app = basic_stack.app
    guesser = TestClient(app, client=("203.0.113.7", 40000))
    wrong = {"Authorization": "Basic " + base64.b64encode(b"alice:guess").decode()}
    allowed = basic_stack.settings.api.login_failures
    for _ in range(allowed):
        assert guesser.get("/v1/nodes", headers=wrong).status_code == 401
    held = guesser.get("/v1/nodes", headers=ADMIN.headers)
    assert held.status_code == 429, "even the right password is not checked meanwhile"
    assert int(held.headers["Retry-After"]) > 0
    assert "Too many failed logins" in error_text(held)
    elsewhere = TestClient(app, client=("198.51.100.8", 40000))
    assert elsewhere.get("/v1/nodes", headers=ADMIN.headers).status_code == 200
