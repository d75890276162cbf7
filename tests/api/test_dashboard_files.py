"""``/dashboard/``: the page's files are public and hold no data; the data stays guarded."""

from __future__ import annotations

from pathlib import Path

from metalforge import states
from tests.support.auth import basic_auth_settings
from tests.support.stack import start_stack


def test_the_page_is_public_and_the_api_behind_it_is_not(tmp_path: Path) -> None:
    stack = start_stack(basic_auth_settings(f"sqlite:///{tmp_path}/mf.sqlite", tmp_path))
    try:
        client = stack.client
        page = client.get("/dashboard/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert client.get("/dashboard", follow_redirects=False).headers["location"] == "/dashboard/"
        assert client.get("/dashboard/static/app.js").status_code == 200
        assert client.get("/dashboard/static/..%2F..%2Fcli.py").status_code == 404
        verbs = client.get("/dashboard/states.json").json()["verbs_by_state"]
        assert verbs[states.MANAGEABLE] == [
            e for e in states.allowed_events(states.MANAGEABLE) if e in states.VERBS
        ]
        assert "done" not in verbs[states.CLEANING]  # internal events are not offered
        assert client.get("/v1/nodes").status_code == 401
        assert client.get("/v1/events").status_code == 401
    finally:
        stack.stop()
