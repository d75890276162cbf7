"""``/dashboard/``: the page's files are public and hold no data; the data stays guarded."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from sqlalchemy import JSON, inspect

from metalforge import states
from metalforge.api.routes.dashboard import STATIC_DIR
from metalforge.db.flow_progress import StepKind
from metalforge.db.models import Node
from tests.support.auth import basic_auth_settings
from tests.support.stack import Stack, start_stack


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


def test_states_json_gives_the_page_every_verb_and_running_step_field(sqlite_stack: Stack) -> None:
    """The page's action buttons and step column read the server's tables, not a copy."""
    table = sqlite_stack.client.get("/dashboard/states.json").json()
    assert table["verbs"] == list(states.VERBS)
    assert table["verb_aliases"] == dict(states.VERB_ALIASES)
    assert set(table["verbs"]).issuperset(table["verb_aliases"].values())
    step_columns = [
        column.key
        for column in inspect(Node).columns
        if column.key.endswith("_step") and isinstance(column.type, JSON)
    ]
    assert table["step_fields"] == step_columns
    # One running-step column per kind of step flow.
    assert set(table["step_fields"]) == {f"{kind}_step" for kind in get_args(StepKind)}


def test_the_page_modules_are_served_as_javascript(sqlite_stack: Stack) -> None:
    """A browser runs a ``<script type="module">`` only when it is served as JavaScript."""
    modules = sorted(STATIC_DIR.glob("*.js"))
    assert len(modules) > 1
    for module in modules:
        answer = sqlite_stack.client.get(f"/dashboard/static/{module.name}")
        assert answer.status_code == 200, module.name
        assert answer.headers["content-type"].startswith("text/javascript"), module.name
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cache-control"] == "no-cache"
    style = sqlite_stack.client.get("/dashboard/static/style.css")
    assert style.headers["content-type"].startswith("text/css")


MARKUP_SINKS = ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(")
"""What would turn a string into markup or code: the page builds its DOM from elements."""


def test_the_page_modules_are_small_say_what_they_are_for_and_build_no_markup() -> None:
    for module in sorted(STATIC_DIR.glob("*.js")):
        source = module.read_text()
        assert source.startswith("// "), f"{module.name} has no header comment"
        assert len(source.splitlines()) <= 400, f"{module.name} is over 400 lines"
        used = [sink for sink in MARKUP_SINKS if sink in source]
        assert not used, f"{module.name} uses {used}"
