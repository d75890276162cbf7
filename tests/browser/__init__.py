"""The dashboard in a real browser: headless Chromium against an authenticated stack.

Shared by the browser tests and ``make screenshots`` (``screenshots.py`` here). Chromium and its
driver come from Debian packages (``tools/ensure-system-packages.sh test``);
Selenium Manager is never used, so nothing is downloaded.
"""

from __future__ import annotations

import ipaddress
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import requests
from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from metalforge.config import Settings
from metalforge_lab.ports import free_port
from tests.support.api import wait_until
from tests.support.auth import ADMIN, Persona, basic_auth_settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT = 30
"""Seconds a test waits for the page to show something (a loaded 2-core machine is slow)."""
WINDOW = (1280, 900)

CREDENTIALS_KEY = "metalforge.dashboard.credentials"
"""Where the page keeps the credentials (``sessionStorage``)."""


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if absent:
        return f"{' and '.join(absent)} not installed (tools/ensure-system-packages.sh test)"
    return None


def new_driver(profile: Path) -> webdriver.Chrome:
    """Headless Chromium at a fixed 1280x900, scale 1, with a throwaway profile."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        "--force-device-scale-factor=1",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT)
    driver.set_script_timeout(WAIT)
    return driver


def dashboard_settings(db_url: str, state_dir: Path) -> Settings:
    """An http_basic stack where every test persona can log in; its inspector on a free port."""
    settings = basic_auth_settings(db_url, state_dir)
    # The images the pages attach are served on this host's loopback.
    netboot = settings.conductor.netboot.model_copy(
        update={"fetch_allowed_networks": [ipaddress.ip_network("127.0.0.0/8")]}
    )
    return settings.model_copy(
        update={
            "inspector": settings.inspector.model_copy(update={"port": free_port()}),
            "conductor": settings.conductor.model_copy(update={"netboot": netboot}),
        }
    )


@contextmanager
def browser() -> Iterator[webdriver.Chrome]:
    """One Chromium with a profile directory removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        driver = new_driver(Path(profile))
        try:
            yield driver
        finally:
            driver.quit()


class Api:
    """The API as one persona, over HTTP (to set up what the page then shows)."""

    def __init__(self, url: str, persona: Persona = ADMIN) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers.update(persona.headers)

    def close(self) -> None:
        self.session.close()

    def call(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        response = self.session.request(method, self.url + path, json=body, timeout=WAIT)
        assert response.status_code == expect, f"{method} {path}: {response.text}"
        return response.json() if response.content else None

    def create_node(self, **fields: Any) -> dict[str, Any]:
        node: dict[str, Any] = self.call(
            "POST", "/v1/nodes", {"driver": "fake-hardware", **fields}, expect=201
        )
        return node

    def node(self, ident: str) -> dict[str, Any]:
        node: dict[str, Any] = self.call("GET", f"/v1/nodes/{ident}")
        return node

    def provision(self, ident: str, target: str) -> None:
        self.call("PUT", f"/v1/nodes/{ident}/states/provision", {"target": target}, expect=202)

    def wait_for_state(self, ident: str, state: str) -> dict[str, Any]:
        """Until the node rests in ``state`` (no target left)."""

        def settled() -> dict[str, Any] | None:
            node = self.node(ident)
            done = node["provision_state"] == state and node["target_provision_state"] is None
            return node if done else None

        node: dict[str, Any] = wait_until(f"node {ident} in {state}", settled, timeout=WAIT)
        return node

    def manageable(self, **fields: Any) -> dict[str, Any]:
        """Enroll a node and take it to ``manageable``."""
        node = self.create_node(**fields)
        self.provision(node["uuid"], "manage")
        return self.wait_for_state(node["uuid"], "manageable")

    def available(self, **fields: Any) -> dict[str, Any]:
        """Enroll a node and take it to ``available`` (through cleaning)."""
        node = self.manageable(**fields)
        self.provision(node["uuid"], "provide")
        return self.wait_for_state(node["uuid"], "available")


def wait(driver: webdriver.Chrome, timeout: float = WAIT) -> WebDriverWait[webdriver.Chrome]:
    return WebDriverWait(driver, timeout, poll_frequency=0.1)


def visible(driver: webdriver.Chrome, css: str) -> WebElement:
    """The first element matching ``css`` once it is displayed."""
    element: WebElement = wait(driver).until(
        ec.visibility_of_element_located((By.CSS_SELECTOR, css)), f"{css} never showed"
    )
    return element


def text_of(driver: webdriver.Chrome, css: str) -> str:
    """The text of the element matching ``css`` once it shows (found again if replaced)."""

    def shown(d: webdriver.Chrome) -> tuple[str] | Literal[False]:
        try:
            element = d.find_element(By.CSS_SELECTOR, css)
            return (element.text,) if element.is_displayed() else False
        except (NoSuchElementException, StaleElementReferenceException):
            return False

    found: tuple[str] = wait(driver).until(shown, f"{css} never showed")
    return found[0]


def click(driver: webdriver.Chrome, css: str) -> None:
    """Click the element matching ``css`` once it can be clicked.

    The page rebuilds parts of itself as events arrive, so an element found a
    moment ago may be gone: look it up again until the click lands.
    """

    def clicked(d: webdriver.Chrome) -> bool:
        try:
            element = d.find_element(By.CSS_SELECTOR, css)
            if not (element.is_displayed() and element.is_enabled()):
                return False
            element.click()
        except (
            NoSuchElementException,
            StaleElementReferenceException,
            ElementClickInterceptedException,
        ):
            return False
        return True

    wait(driver).until(clicked, f"{css} could not be clicked")


def sign_out_everywhere(driver: webdriver.Chrome, url: str) -> None:
    """Open the dashboard with no stored credentials: the sign-in form shows."""
    driver.get(f"{url}/dashboard/#/")
    driver.execute_script("window.sessionStorage.clear();")
    driver.refresh()
    visible(driver, "#login-form")


def sign_in(
    driver: webdriver.Chrome, url: str, persona: Persona, *, password: str | None = None
) -> None:
    """Type ``persona``'s user name and password into the sign-in form and submit it."""
    sign_out_everywhere(driver, url)
    driver.find_element(By.ID, "auth-basic").click()
    user = driver.find_element(By.ID, "login-username")
    user.clear()
    user.send_keys(persona.name)
    secret = driver.find_element(By.ID, "login-password")
    secret.clear()
    secret.send_keys(persona.password if password is None else password)
    driver.find_element(By.ID, "login-submit").click()


def signed_in(driver: webdriver.Chrome, url: str, persona: Persona) -> None:
    """Sign in as ``persona`` and wait until the page says who is signed in."""
    sign_in(driver, url, persona)
    wait(driver).until(
        ec.text_to_be_present_in_element_attribute((By.ID, "whoami"), "data-user", persona.name),
        f"never signed in as {persona.name}",
    )


def open_view(driver: webdriver.Chrome, fragment: str) -> None:
    """Follow an in-page link (hash routing: no page load)."""
    driver.execute_script("window.location.hash = arguments[0];", fragment)
