"""``make screenshots``: the dashboard's pictures in ``docs/images/``, from a throwaway fleet.

Starts an http_basic all-in-one stack on a temporary SQLite database (as the
browser tests do), enrolls a small fake fleet in a spread of states (some
cleaned and deployed first, so the running deployment has estimates from
earlier runs), then signs headless Chromium in and saves 1280x900 pictures
of the fleet, a node with a deployment running, the allocations, the deploy
templates, and an action refused to a reader. Nothing is left behind but the
PNG files.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.browser import (
    WINDOW,
    Api,
    browser,
    click,
    dashboard_settings,
    missing_browser,
    open_view,
    signed_in,
    visible,
)
from tests.support.api import wait_until
from tests.support.auth import ADMIN, READER
from tests.support.stack import serving

ROOT = Path(__file__).resolve().parents[2]
"""The project's root: the pictures go under its ``docs/images/``."""
SHORT_STEP = 2.0
"""Seconds each fake asynchronous step takes while the fleet is prepared."""
LONG_STEP = 900.0
"""Seconds each step of the pictured deployment takes: it is still running when pictured."""
IMAGE = {
    "image_source": "http://images.example.net/ubuntu-24.04.qcow2",
    "image_checksum": "5d41402abc4b2a76b9719d911017c592",
}


def enroll(api: Api, name: str, **fields: Any) -> dict[str, Any]:
    node = api.create_node(
        name=name,
        driver_info={"fake_step_delay": SHORT_STEP},
        instance_info=IMAGE,
        **fields,
    )
    return node


def add_port(api: Api, node: dict[str, Any], mac: str, switch_port: str) -> None:
    api.call(
        "POST",
        "/v1/ports",
        {
            "node_uuid": node["uuid"],
            "address": mac,
            "pxe_enabled": True,
            "local_link_connection": {
                "switch_id": "0a:1b:2c:3d:4e:5f",
                "switch_info": "leaf-a1",
                "port_id": switch_port,
            },
        },
        expect=201,
    )


def wait_for_all(api: Api, uuids: list[str], state: str) -> None:
    for uuid in uuids:
        api.wait_for_state(uuid, state)


def build_fleet(api: Api) -> dict[str, dict[str, Any]]:
    """A dozen nodes in the states an operator meets, named as a small site would."""
    compute = [
        enroll(
            api,
            f"compute-{i:02d}",
            resource_class="baremetal-compute",
            conductor_group="rack-a",
            properties={"cpus": 32, "memory_mb": 131072, "local_gb": 894},
        )
        for i in range(1, 7)
    ]
    gpu = [
        enroll(api, f"gpu-{i:02d}", resource_class="baremetal-gpu", conductor_group="rack-b")
        for i in (1, 2)
    ]
    storage = [
        enroll(
            api, f"storage-{i:02d}", resource_class="baremetal-storage", conductor_group="rack-b"
        )
        for i in (1, 2, 3)
    ]
    for i, node in enumerate(compute):
        add_port(api, node, f"52:54:00:0a:00:{i + 1:02x}", f"Ethernet1/{i + 1}")
    api.call("PUT", f"/v1/nodes/{gpu[0]['uuid']}/traits/CUSTOM_GPU_A100", expect=204)
    api.call("PUT", f"/v1/nodes/{compute[5]['uuid']}/traits/HW_CPU_X86_AVX2", expect=204)

    # Everything but storage-03 (left in enroll) is verified; all compute and GPU nodes cleaned.
    for node in [*compute, *gpu, *storage[:2]]:
        api.provision(node["uuid"], "manage")
    wait_for_all(api, [n["uuid"] for n in [*compute, *gpu, *storage[:2]]], "manageable")
    # gpu-02's erase fails: it ends in "clean failed" with an error to read.
    api.call(
        "PATCH",
        f"/v1/nodes/{gpu[1]['uuid']}",
        [{"op": "add", "path": "/driver_info/fake_fail_steps", "value": "deploy.erase_devices"}],
    )
    for node in [*compute, *gpu]:
        api.provision(node["uuid"], "provide")
    wait_for_all(api, [n["uuid"] for n in [*compute, gpu[0]]], "available")
    wait_until("gpu-02 failing its clean", lambda: api.node(gpu[1]["uuid"])["last_error"], 60)

    # Three deployments finish, so the pictured one has estimates for every step.
    for node in compute[:3]:
        api.provision(node["uuid"], "active")
    wait_for_all(api, [n["uuid"] for n in compute[:3]], "active")

    # compute-06's steps take long: its deployment is still running when pictured.
    api.call(
        "PATCH",
        f"/v1/nodes/{compute[5]['uuid']}",
        [{"op": "replace", "path": "/driver_info/fake_step_delay", "value": LONG_STEP}],
    )
    api.provision(compute[5]["uuid"], "active")
    wait_until(
        "compute-06 deploying",
        lambda: api.call("GET", f"/v1/nodes/{compute[5]['uuid']}/progress")["current_step"],
        60,
    )
    api.call(
        "PUT",
        f"/v1/nodes/{storage[1]['uuid']}/maintenance",
        {"reason": "disk 3 reports SMART errors; replacement ordered"},
        expect=202,
    )

    api.call(
        "POST",
        "/v1/deploy_templates",
        {
            "name": "CUSTOM_BIOS_DEFAULTS",
            "steps": [
                {"interface": "management", "step": "reset_bios", "args": {}, "priority": 150}
            ],
        },
        expect=201,
    )
    api.call(
        "POST",
        "/v1/deploy_templates",
        {
            "name": "CUSTOM_RAID1",
            "steps": [
                {"interface": "raid", "step": "delete_configuration", "args": {}, "priority": 160},
                {
                    "interface": "raid",
                    "step": "create_configuration",
                    "args": {"create_root_volume": True},
                    "priority": 150,
                },
            ],
        },
        expect=201,
    )
    api.call(
        "POST",
        "/v1/allocations",
        {"name": "ci-runner-1", "resource_class": "baremetal-compute"},
        expect=201,
    )
    api.call(
        "POST",
        "/v1/allocations",
        {
            "name": "training-job-7",
            "resource_class": "baremetal-gpu",
            "traits": ["CUSTOM_GPU_H100"],
        },
        expect=201,
    )
    nodes = {n["name"]: n for n in [*compute, *gpu, *storage]}
    return nodes


def settle(driver: webdriver.Chrome) -> None:
    """Wait until the live stream is connected (or known to be unavailable)."""
    visible(driver, '#live-status:is([data-live="live"], [data-live="unavailable"])')


def take(driver: webdriver.Chrome, out: Path, name: str) -> None:
    path = out / f"dashboard-{name}.png"
    driver.save_screenshot(str(path))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def pictures(url: str, nodes: dict[str, dict[str, Any]], out: Path) -> None:
    with browser() as driver:
        # The window's size includes the browser's own frame: fix the page's at 1280x900.
        width, height = WINDOW
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(f"{url}/dashboard/")
        visible(driver, "#login-form")
        driver.find_element(By.ID, "login-username").send_keys(ADMIN.name)
        take(driver, out, "login")

        signed_in(driver, url, ADMIN)
        visible(driver, '#fleet-table[data-loaded="true"]')
        settle(driver)
        take(driver, out, "fleet")

        running = nodes["compute-06"]["uuid"]
        open_view(driver, f"#/nodes/{running}")
        visible(driver, '#view[data-loaded="true"]')
        visible(driver, '#node-progress li[data-status="running"]')
        settle(driver)
        take(driver, out, "node")

        open_view(driver, "#/allocations")
        visible(driver, '#allocations[data-loaded="true"]')
        take(driver, out, "allocations")

        open_view(driver, "#/templates")
        visible(driver, '#templates[data-loaded="true"]')
        take(driver, out, "templates")

        signed_in(driver, url, READER)
        open_view(driver, f"#/nodes/{nodes['compute-04']['uuid']}")
        visible(driver, '#view[data-loaded="true"]')
        click(driver, "#action-maintenance-on")
        visible(driver, "#confirm-dialog[open]")
        driver.find_element(By.ID, "confirm-reason").send_keys("firmware update")
        take(driver, out, "confirm")
        driver.find_element(By.ID, "confirm-ok").click()
        visible(driver, "#error-banner")
        settle(driver)
        take(driver, out, "refused")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--output-dir", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go"
    )
    args = parser.parse_args(argv)
    why = missing_browser()
    if why:
        print(f"cannot take screenshots: {why}", file=sys.stderr)
        return 1
    out: Path = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    # The stack logs what its fake nodes do (one fails on purpose): only warnings matter here.
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("metalforge").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="metalforge-screenshots-") as state:
        settings = dashboard_settings(f"sqlite:///{state}/metalforge.sqlite", Path(state))
        with serving(settings) as server:
            api = Api(server.url, ADMIN)
            try:
                nodes = build_fleet(api)
                pictures(server.url, nodes, out)
            finally:
                api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
