"""The operator dashboard in headless Chromium, signed in as the test personas.

The page reads everything from ``/v1`` with the credentials typed into it,
so these tests check what an operator sees: the fleet as a reader, a node
moving through ``provide`` on the live stream without a page load, an
action confirmed in the page's dialog as an admin, the API's refusal of the
same action shown to a reader, a refused password, and the API's strings
shown as text even when they hold markup. Every wait is for a condition in
the page, never for a time.
"""

from __future__ import annotations

import contextlib
from contextlib import closing
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec

from tests.browser import (
    CREDENTIALS_KEY,
    Api,
    click,
    open_view,
    sign_in,
    signed_in,
    text_of,
    visible,
    wait,
)
from tests.support.auth import ADMIN, READER
from tests.support.redfish import serve_directory
from tests.support.stack import LiveServer

pytestmark = pytest.mark.slow

HOSTILE = '<img src=x onerror="window.__xss=1"><b>bold</b>'
"""Markup the API stores as plain text (a description, a reason): the page must show it as such."""


def row(uuid: str) -> str:
    return f'#fleet-rows tr[data-node-uuid="{uuid}"]'


def row_in_state(uuid: str, state: str) -> str:
    return f'{row(uuid)}[data-provision-state="{state}"]'


def stored_credentials(driver: webdriver.Chrome) -> object:
    return driver.execute_script("return sessionStorage.getItem(arguments[0]);", CREDENTIALS_KEY)


def node_page(driver: webdriver.Chrome, uuid: str) -> None:
    """Open a node's page and wait until it has read the node."""
    open_view(driver, f"#/nodes/{uuid}")
    visible(driver, f'#node-title[data-node-uuid="{uuid}"]')
    visible(driver, '#view[data-loaded="true"]')


def confirm(driver: webdriver.Chrome, button: str, reason: str | None = None) -> None:
    """Click an action, check the dialog asks first, and confirm it."""
    click(driver, button)
    visible(driver, "#confirm-dialog[open]")
    if reason is not None:
        field = visible(driver, "#confirm-reason")
        field.send_keys(reason)
    driver.find_element(By.ID, "confirm-ok").click()
    wait(driver).until(
        ec.invisibility_of_element_located((By.CSS_SELECTOR, "#confirm-dialog[open]"))
    )


def test_reader_sees_the_fleet(page: webdriver.Chrome, server: LiveServer, admin_api: Api) -> None:
    first = admin_api.create_node(name="fleet-enrolled", resource_class="baremetal")
    second = admin_api.manageable(name="fleet-managed", conductor_group="rack-1")

    signed_in(page, server.url, READER)

    assert "bob" in text_of(page, "#whoami")
    visible(page, row_in_state(first["uuid"], "enroll"))
    visible(page, row_in_state(second["uuid"], "manageable"))
    assert text_of(page, f"{row(first['uuid'])} td.name a") == "fleet-enrolled"
    assert "baremetal" in text_of(page, row(first["uuid"]))
    assert "rack-1" in text_of(page, row(second["uuid"]))
    visible(page, f'{row(second["uuid"])} td.provision-state .state[data-state="manageable"]')
    # The credentials live in this tab's sessionStorage only, never in localStorage or the URL.
    assert stored_credentials(page) is not None
    assert page.execute_script("return localStorage.length;") == 0
    assert READER.password not in page.current_url

    # The filter box hides the rows that do not match.
    visible(page, "#fleet-filter").send_keys("fleet-managed")
    wait(page).until(ec.invisibility_of_element_located((By.CSS_SELECTOR, row(first["uuid"]))))
    assert visible(page, row(second["uuid"]))

    # The row links to the node's page.
    click(page, f"{row(second['uuid'])} td.name a")
    visible(page, f'#node-title[data-node-uuid="{second["uuid"]}"]')

    # Logging out forgets the credentials.
    visible(page, "#logout").click()
    visible(page, "#login-form")
    assert stored_credentials(page) is None


def test_fleet_row_follows_provide_without_reload(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api
) -> None:
    node = admin_api.manageable(name="live-provide")
    uuid = node["uuid"]
    signed_in(page, server.url, READER)
    visible(page, row_in_state(uuid, "manageable"))
    visible(page, '#live-status[data-live="live"]')
    assert "live" in page.find_element(By.ID, "live-status").text
    page.execute_script("window.__marker = 1;")

    admin_api.provision(uuid, "provide")

    visible(page, row_in_state(uuid, "available"))
    assert page.execute_script("return window.__marker;") == 1, "the page was reloaded"
    assert admin_api.node(uuid)["provision_state"] == "available"


def test_admin_confirms_actions_on_the_node_page(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api
) -> None:
    node = admin_api.create_node(name="admin-actions")
    uuid = node["uuid"]
    signed_in(page, server.url, ADMIN)
    node_page(page, uuid)

    # Cancel changes nothing.
    click(page, "#action-maintenance-on")
    visible(page, "#confirm-dialog[open]")
    page.find_element(By.ID, "confirm-cancel").click()
    wait(page).until(ec.invisibility_of_element_located((By.CSS_SELECTOR, "#confirm-dialog[open]")))
    assert admin_api.node(uuid)["maintenance"] is False

    confirm(page, "#action-maintenance-on", reason="replacing a fan")
    visible(page, '#node-state[data-maintenance="true"]')
    reason = text_of(page, '#node-fields dd[data-field="maintenance_reason"]')
    assert reason == "replacing a fan"
    assert admin_api.node(uuid)["maintenance_reason"] == "replacing a fan"

    confirm(page, "#action-maintenance-off")
    visible(page, '#node-state[data-maintenance="false"]')

    # enroll offers "manage"; the node verifies and rests in manageable.
    confirm(page, "#action-manage")
    visible(page, '#node-state[data-provision-state="manageable"]')
    assert admin_api.node(uuid)["provision_state"] == "manageable"
    visible(page, "#action-provide")
    banner = page.find_element(By.ID, "error-banner")
    assert banner.is_displayed() is False, banner.text
    # The history is re-read after each event: wait for the move to reach it.
    wait(page).until(
        ec.text_to_be_present_in_element((By.ID, "node-history"), "verifying -> manageable")
    )
    assert "by alice" in page.find_element(By.ID, "node-history").text
    # The last flow's timeline: one bar per state it went through.
    visible(page, '#flow-phases li[data-state="manageable"]')
    bars = page.find_elements(By.CSS_SELECTOR, "#flow-phases li")
    assert [bar.get_attribute("data-state") for bar in bars] == ["verifying", "manageable"]


def test_reader_is_refused_and_sees_why(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api
) -> None:
    node = admin_api.manageable(name="reader-refused")
    uuid = node["uuid"]
    signed_in(page, server.url, READER)
    node_page(page, uuid)

    confirm(page, "#action-maintenance-on", reason="not mine to set")
    banner = text_of(page, "#error-banner")
    assert "403" in banner
    assert "Access was denied" in banner
    assert "baremetal:node:set_maintenance" in banner

    click(page, "#error-dismiss")
    confirm(page, "#action-provide")
    assert "baremetal:node:set_provision_state" in text_of(page, "#error-banner")

    unchanged = admin_api.node(uuid)
    assert unchanged["maintenance"] is False
    assert unchanged["provision_state"] == "manageable"
    assert page.find_element(By.ID, "node-state").get_attribute("data-maintenance") == "false"


def test_wrong_password_shows_the_login_error(page: webdriver.Chrome, server: LiveServer) -> None:
    sign_in(page, server.url, ADMIN, password="not-the-password")

    assert "Incorrect username or password" in text_of(page, "#login-error")
    assert page.find_element(By.ID, "view").is_displayed() is False
    assert stored_credentials(page) is None

    # Credentials that stop working (a changed password) lead back to the form.
    page.execute_script(
        "sessionStorage.setItem(arguments[0], JSON.stringify("
        "{kind: 'basic', user: 'alice', header: 'Basic ' + btoa('alice:changed')}));",
        CREDENTIALS_KEY,
    )
    page.refresh()
    assert "Incorrect username or password" in text_of(page, "#login-error")
    assert stored_credentials(page) is None


def test_markup_from_the_api_is_shown_as_text(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api
) -> None:
    # Node names must be logical names (the API refuses markup there), so the
    # markup goes where the API takes free text.
    node = admin_api.create_node(
        name="hostile-strings", resource_class=HOSTILE, description=HOSTILE
    )
    uuid = node["uuid"]
    admin_api.call("PUT", f"/v1/nodes/{uuid}/maintenance", {"reason": HOSTILE}, expect=202)
    signed_in(page, server.url, READER)

    assert HOSTILE in text_of(page, row(uuid))
    assert not page.find_elements(By.CSS_SELECTOR, "#view img, #view b")

    node_page(page, uuid)
    for field in ("description", "maintenance_reason", "resource_class"):
        assert text_of(page, f'#node-fields dd[data-field="{field}"]') == HOSTILE
    assert not page.find_elements(By.CSS_SELECTOR, "#view img, #view b")
    assert page.execute_script("return window.__xss;") is None


def test_no_authentication_on_a_noauth_service(
    page: webdriver.Chrome, live_server: LiveServer
) -> None:
    """A loopback ``noauth`` service: the page goes straight to the fleet, no sign-in form."""
    with closing(Api(live_server.url, ADMIN)) as api:
        node = api.create_node(name="noauth-node")
    page.get(f"{live_server.url}/dashboard/#/")
    page.execute_script("window.sessionStorage.clear();")
    page.refresh()

    visible(page, row_in_state(node["uuid"], "enroll"))
    assert visible(page, "#whoami").get_attribute("data-user") == "no authentication"
    assert not page.find_element(By.ID, "login").is_displayed()


def test_node_page_shows_firmware_and_bios_settings(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api
) -> None:
    node = admin_api.manageable(name="firmware-page")
    steps = [
        {
            "interface": "bios",
            "step": "apply_configuration",
            "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]},
        },
        {
            "interface": "firmware",
            "step": "update",
            "args": {"settings": [{"component": "bios", "url": "https://fw.example.com/b.bin"}]},
        },
    ]
    admin_api.call(
        "PUT",
        f"/v1/nodes/{node['uuid']}/states/provision",
        {"target": "clean", "clean_steps": steps},
        expect=202,
    )
    admin_api.wait_for_state(node["uuid"], "manageable")
    signed_in(page, server.url, ADMIN)

    node_page(page, node["uuid"])
    assert "1.0.1" in text_of(page, "#firmware-table")
    assert "ProcTurboMode" in text_of(page, "#bios-table")
    assert "Disabled" in text_of(page, "#bios-table")


def fill(driver: webdriver.Chrome, css: str, value: str) -> None:
    field = visible(driver, css)
    field.clear()
    field.send_keys(value)


def dialog_ok(driver: webdriver.Chrome) -> None:
    driver.find_element(By.ID, "confirm-ok").click()
    wait(driver).until(
        ec.invisibility_of_element_located((By.CSS_SELECTOR, "#confirm-dialog[open]"))
    )


def deployed_node_page(page: webdriver.Chrome, server: LiveServer, api: Api, name: str) -> str:
    """A deployed fake-hardware node's page, signed in as an admin; the node's UUID."""
    uuid = str(api.available(name=name)["uuid"])
    api.provision(uuid, "active")
    api.wait_for_state(uuid, "active")
    signed_in(page, server.url, ADMIN)
    node_page(page, uuid)
    return uuid


def test_a_deployed_node_is_flashed_and_serviced_from_its_page(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api
) -> None:
    uuid = deployed_node_page(page, server, admin_api, "day-two")
    # fake-hardware's pretend firmware shows once it was first updated.
    assert "No firmware versions read yet" in text_of(page, "#node-firmware")

    # A firmware update on a deployed node runs as servicing; the table follows it.
    click(page, "#action-firmware-update")
    visible(page, "#confirm-dialog[open]")
    fill(page, "#confirm-input-url", "https://fw.example.com/bios.bin")
    dialog_ok(page)
    wait(page).until(ec.text_to_be_present_in_element((By.ID, "firmware-table"), "1.0.1"))
    wait(page).until(
        ec.text_to_be_present_in_element((By.ID, "node-history"), "firmware.update finished")
    )
    visible(page, '#node-state[data-provision-state="active"]')

    # Service with steps typed as JSON: the BIOS setting shows once it ran.
    steps = (
        '[{"interface": "bios", "step": "apply_configuration", "args": '
        '{"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}}]'
    )
    click(page, "#action-service")
    visible(page, "#confirm-dialog[open]")
    fill(page, "#confirm-input-steps", steps)
    dialog_ok(page)
    wait(page).until(ec.text_to_be_present_in_element((By.ID, "bios-table"), "Disabled"))
    visible(page, '#node-state[data-provision-state="active"]')
    assert admin_api.node(uuid)["service_step"] == {}


def test_refused_day_two_requests_are_shown_and_media_is_mounted(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api, tmp_path: Path
) -> None:
    uuid = deployed_node_page(page, server, admin_api, "day-two-media")

    # What the page cannot send is said, and nothing moves.
    click(page, "#action-service")
    visible(page, "#confirm-dialog[open]")
    fill(page, "#confirm-input-steps", "[{not json")
    dialog_ok(page)
    banner = visible(page, "#error-banner")
    assert "Service was refused" in banner.text
    assert "not JSON" in banner.text
    assert admin_api.node(uuid)["provision_state"] == "active"
    # The API's refusal is shown too: a step the node does not offer for servicing.
    click(page, "#action-service")
    visible(page, "#confirm-dialog[open]")
    fill(page, "#confirm-input-steps", '[{"interface": "deploy", "step": "erase_devices"}]')
    dialog_ok(page)
    wait(page).until(ec.text_to_be_present_in_element((By.ID, "error-banner"), "(400)"))
    assert "deploy.erase_devices" in text_of(page, "#error-banner")

    # Virtual media: attach an ISO (served here; metalforge fetches it) to the CD drive,
    # then eject it.
    (tmp_path / "rescue.iso").write_bytes(b"\0" * 0x8001 + b"CD001\x01" + b"\0" * 2042)
    with contextlib.contextmanager(serve_directory)(tmp_path) as images:
        image = f"{images}/rescue.iso"
        click(page, "#action-vmedia-attach")
        visible(page, "#confirm-dialog[open]")
        fill(page, "#confirm-input-image_url", image)
        dialog_ok(page)
        visible(page, '#node-vmedia[data-inserted="true"]')
    # The BMC is given the copy metalforge serves (image_download_source "local").
    assert "/boot/images/" in text_of(page, "#vmedia-table")
    drives = admin_api.call("GET", f"/v1/nodes/{uuid}/vmedia")
    assert [d["inserted"] for d in drives].count(True) == 1
    confirm(page, "#action-vmedia-detach")
    visible(page, '#node-vmedia[data-inserted="false"]')
    assert not any(d["inserted"] for d in admin_api.call("GET", f"/v1/nodes/{uuid}/vmedia"))


def test_the_rollouts_page_follows_a_rollout_and_resumes_it_after_the_canary(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api
) -> None:
    nodes = [admin_api.manageable(name=f"page-rollout-{n}")["uuid"] for n in range(2)]
    body = {"action": {"verb": "provide"}, "selector": {"nodes": nodes}, "canary": 1}
    created = admin_api.call("POST", "/v1/rollouts", body, expect=201)
    signed_in(page, server.url, ADMIN)
    open_view(page, "#/rollouts")
    card = f'section.rollout[data-rollout-uuid="{created["uuid"]}"]'
    # The page reads the rollout again while it is shown: the canary's end shows unasked.
    visible(page, f'{card}[data-rollout-state="paused"]')
    assert "the canary finished" in text_of(page, card)
    confirm(page, f"#rollout-resume-{created['uuid']}")
    visible(page, f'{card}[data-rollout-state="done"]')
    assert "2 succeeded" in text_of(page, card)


def test_the_firmware_page_lists_each_baselines_drifted_nodes(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api
) -> None:
    node = admin_api.manageable(name="drifted-node")
    component = {"component": "bios", "version": "9.9.9", "url": "http://fw.example.com/b.bin"}
    baseline = admin_api.call(
        "POST",
        "/v1/firmware_baselines",
        {"name": "page-baseline", "components": [component]},
        expect=201,
    )
    signed_in(page, server.url, ADMIN)
    open_view(page, "#/firmware")
    shown = text_of(page, f'section.baseline[data-baseline-uuid="{baseline["uuid"]}"]')
    assert "drifted-node" in shown
    assert "9.9.9" in shown
    assert node["uuid"] in shown


IN_PAGE_MODULES = """
const done = arguments[arguments.length - 1];
const url = (name) => new URL(`static/${name}.js`, document.baseURI).href;
Promise.all([import(url("session")), import(url("flow"))])
  .then(([session, flow]) => {
    SCRIPT
  })
  .catch((err) => done(`failed: ${err}`));
"""


def in_page_module(driver: webdriver.Chrome, script: str) -> object:
    """Run ``script`` with the page's own modules (``session`` and ``flow``) and return
    what it passes to ``done``: the same module instances the page runs, so what it
    changes in ``session.app`` the page sees."""
    return driver.execute_async_script(IN_PAGE_MODULES.replace("SCRIPT", script))


def test_the_buttons_are_the_verbs_the_server_lists(
    page: webdriver.Chrome, server: LiveServer, admin_api: Api
) -> None:
    """A verb the state table lists gets a button even when the page has no label for it;
    one it does not list gets none, even where a state would take it."""
    uuid = admin_api.create_node(name="server-verbs")["uuid"]
    signed_in(page, server.url, ADMIN)
    visible(page, '#fleet-table[data-loaded="true"]')  # the state table is read by then
    changed = in_page_module(
        page,
        """
        const table = structuredClone(session.app.states);
        table.verbs = table.verbs.filter((verb) => verb !== "manage").concat(["run_burn_in"]);
        table.verbs_by_state.enroll = table.verbs_by_state.enroll.concat(["run_burn_in"]);
        session.app.states = table;
        done(table.verbs_by_state.enroll.includes("manage"));
        """,
    )
    assert changed is True, changed
    node_page(page, uuid)

    button = visible(page, "#action-run_burn_in")
    assert button.text == "Run burn in"
    assert not page.find_elements(By.ID, "action-manage")
    # The page sends the verb as it is listed; this server has no such verb and says so.
    confirm(page, "#action-run_burn_in")
    banner = text_of(page, "#error-banner")
    assert "Run burn in was refused (400)" in banner
    assert admin_api.node(uuid)["provision_state"] == "enroll"


def test_the_running_step_fields_are_the_ones_the_server_lists(
    page: webdriver.Chrome, server: LiveServer
) -> None:
    signed_in(page, server.url, READER)
    visible(page, '#fleet-table[data-loaded="true"]')
    shown = in_page_module(
        page,
        """
        const node = { deploy_step: { interface: "deploy", step: "write_image" } };
        const listed = session.app.states.step_fields;
        const step = flow.currentStep(node);
        session.app.states = { ...session.app.states, step_fields: ["clean_step"] };
        done([listed, step && step.label, flow.currentStep(node)]);
        """,
    )
    assert shown == [["clean_step", "deploy_step", "service_step"], "deploy.write_image", None]
