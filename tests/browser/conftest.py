"""Fixtures of the browser tests: one authenticated stack and one Chromium per module.

Starting Chromium takes seconds on a small machine, so a module shares one
browser and one server; each test enrolls nodes of its own and signs in
afresh. Without Chromium the tests are skipped, except in CI where a missing
browser is a broken test environment and fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from selenium import webdriver

from tests.browser import Api, browser, dashboard_settings, missing_browser
from tests.conftest import IN_CI
from tests.support.auth import ADMIN
from tests.support.stack import LiveServer, serving

CONSOLE_FAILURES = ("Content Security Policy", "Uncaught", "TypeError", "ReferenceError")
"""Console messages that mean the page itself broke (refused requests are expected)."""


@pytest.fixture(scope="module")
def chromium() -> Iterator[webdriver.Chrome]:
    why = missing_browser()
    if why:
        if IN_CI:
            pytest.fail(f"the browser tests cannot run: {why}")
        pytest.skip(why)
    with browser() as driver:
        yield driver


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """An http_basic metalforge where every persona of tests.support.auth can sign in."""
    state = tmp_path_factory.mktemp("dashboard")
    with serving(dashboard_settings(f"sqlite:///{state}/metalforge.sqlite", state)) as live:
        yield live


@pytest.fixture
def admin_api(server: LiveServer) -> Iterator[Api]:
    api = Api(server.url, ADMIN)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def page(chromium: webdriver.Chrome) -> Iterator[webdriver.Chrome]:
    """The module's browser; the test fails if the page logged a script or CSP error."""
    _console(chromium)  # drop what earlier tests left
    yield chromium
    broken = [
        entry["message"]
        for entry in _console(chromium)
        if any(marker in entry["message"] for marker in CONSOLE_FAILURES)
    ]
    assert not broken, f"the page logged errors: {broken}"


def _console(driver: webdriver.Chrome) -> list[dict[str, Any]]:
    """The browser console's messages since the last call (selenium leaves get_log untyped)."""
    entries: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return entries
