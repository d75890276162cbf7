"""Allocations through the real clients: the ``baremetal`` CLI and ``metalsmith``."""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.conftest import BaremetalCli
from tests.support.console_scripts import run_script
from tests.support.stack import LiveServer

METALSMITH = Path(sys.executable).with_name("metalsmith")


def _available(cli: BaremetalCli, name: str, resource_class: str) -> str:
    """An ``available`` node whose power state is known (allocatable)."""
    node = cli.json(
        "node",
        "create",
        "--driver",
        "fake-hardware",
        "--name",
        name,
        "--resource-class",
        resource_class,
    )
    cli.run("node", "manage", name, "--wait", "30")
    cli.run("node", "provide", name)
    cli.until_state(name, "available")
    return str(node["uuid"])


def test_allocation_create_wait_and_delete(cli: BaremetalCli) -> None:
    uuid = _available(cli, "cli-alloc-1", "cli-rc")
    cli.run("node", "add", "trait", "cli-alloc-1", "CUSTOM_FAST")
    allocation = cli.json(
        "allocation",
        "create",
        "--resource-class",
        "cli-rc",
        "--trait",
        "CUSTOM_FAST",
        "--name",
        "cli-a",
        "--wait",
        "30",
    )
    assert allocation["state"] == "active"
    assert allocation["node_uuid"] == uuid
    node = cli.json("node", "show", "cli-alloc-1")
    assert "CUSTOM_FAST" in node["traits"]
    assert node["instance_uuid"] == allocation["uuid"] == node["allocation_uuid"]
    listed = cli.json("allocation", "list")
    assert [a.get("UUID", a.get("uuid")) for a in listed] == [allocation["uuid"]]
    output = cli.error(
        "allocation",
        "create",
        "--resource-class",
        "cli-rc",
        "--trait",
        "CUSTOM_FAST",
        "--wait",
        "30",
    )
    assert "no available nodes match the resource class cli-rc" in output
    cli.run("allocation", "delete", "cli-a")
    node = cli.json("node", "show", "cli-alloc-1")
    assert node["instance_uuid"] is None
    assert node["allocation_uuid"] is None


@pytest.fixture
def image_url(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A small image served over HTTP by a local thread, and its sha256."""
    image = tmp_path / "image.qcow2"
    image.write_bytes(os.urandom(4096))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        yield f"http://127.0.0.1:{port}/image.qcow2", hashlib.sha256(image.read_bytes()).hexdigest()
    finally:
        server.shutdown()
        server.server_close()


def test_metalsmith_deploy_and_undeploy(
    cli: BaremetalCli, live_server: LiveServer, image_url: tuple[str, str]
) -> None:
    if not METALSMITH.exists():
        pytest.skip("metalsmith is not installed in this environment")
    uuid = _available(cli, "ms-1", "ms-rc")
    url, checksum = image_url
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_TYPE="none", OS_ENDPOINT=live_server.url)

    def metalsmith(*args: str) -> None:
        proc = run_script(METALSMITH, ["-q", *args], env, timeout=120)
        assert proc.returncode == 0, f"metalsmith {' '.join(args)}:\n{proc.stdout}{proc.stderr}"

    metalsmith("deploy", "--resource-class", "ms-rc", "--image", url, "--image-checksum", checksum)
    node = cli.json("node", "show", "ms-1")
    assert node["provision_state"] == "active"
    assert node["allocation_uuid"] is not None
    assert node["instance_uuid"] == node["allocation_uuid"]
    allocation = cli.json("allocation", "show", node["allocation_uuid"])
    assert allocation["node_uuid"] == uuid
    assert allocation["name"] == "ms-1"
    metalsmith("undeploy", "ms-1")
    node = cli.json("node", "show", "ms-1")
    assert node["provision_state"] == "available"
    assert node["allocation_uuid"] is None
    assert cli.json("allocation", "list") == []
