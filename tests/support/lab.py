"""What tests of virtual nodes share: requirements, a lab per test module, an image server.

Virtual nodes need root (network namespaces, loop devices, mounts), a few
system tools and the agent's virtualenv. In CI they must run: a missing
requirement fails there; elsewhere the skip says what is missing.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from metalforge_lab import namespaces
from metalforge_lab.agent_runner import default_ipa_python
from metalforge_lab.lab import Lab, LabConfig, VirtualNode
from metalforge_lab.ports import free_port
from tests.clients.conftest import BAREMETAL, BaremetalCli
from tests.support.stack import LiveServer, Stack, start_stack, test_settings

IN_CI = bool(os.environ.get("CI"))
TOOLS = ("ip", "unshare", "losetup", "sgdisk", "parted", "wipefs", "shred", "blkid")
MIB = 1 << 20


def missing_requirements() -> str | None:
    if os.geteuid() != 0:
        return "virtual nodes need root (network namespaces, loop devices, mounts)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)} (make system-packages)"
    if not os.access(default_ipa_python(), os.X_OK):
        return f"no agent virtualenv at {default_ipa_python()} (make .ipa-venv/.installed-stamp)"
    return None


def require_lab() -> None:
    """Fail in CI, skip elsewhere, when virtual nodes cannot run here."""
    reason = missing_requirements()
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"CI must run the virtual lab: {reason}")
    pytest.skip(reason)


def lab_config(state_dir: Path, tag: str, nodes: int, **extra: Any) -> LabConfig:
    """A lab with its own bridge name and a /24 no host interface uses."""
    subnet = ipaddress.IPv4Network(namespaces.free_subnet(seed=os.getpid()))
    bridge_ip = subnet.network_address + 1
    values: dict[str, Any] = {
        "nodes": nodes,
        "api_url": f"http://{bridge_ip}:{free_port()}",
        "state_dir": state_dir,
        "bridge": f"mf{tag}{os.getpid() % 100000}",
        "subnet": str(subnet),
        "emulator_port": free_port(),
        "disks_per_node": 2,
        "disk_size_mib": 32,
        # A wrong checksum should fail at once, not after nine downloads.
        "extra_kernel_params": ("ipa-image-download-connection-retries=0",),
    }
    values.update(extra)
    return LabConfig(**values)


def agent_port(config: LabConfig) -> int:
    return int(config.api_url.rsplit(":", 1)[1])


@contextlib.contextmanager
def image_server(directory: Path, host: str) -> Iterator[str]:
    """Serve ``directory`` on the bridge, where the agent can download from."""
    handler = partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def partition_table(device: str) -> str:
    """The partition table type on ``device`` (``gpt``, ``dos``), or ``""`` when there is none."""
    done = subprocess.run(
        ["blkid", "-p", "-o", "value", "-s", "PTTYPE", device],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()


def nonzero_bytes(path: Path) -> int:
    count = 0
    with path.open("rb") as handle:
        while chunk := handle.read(4 * MIB):
            count += len(chunk) - chunk.count(0)
    return count


@contextlib.contextmanager
def served_for_lab(
    lab: Lab, config: LabConfig, workdir: Path, **conductor: Any
) -> Iterator[tuple[Stack, LiveServer]]:
    """metalforge (SQLite, fake-hardware and redfish) serving the lab's agents on its bridge."""
    settings = test_settings(
        f"sqlite:///{workdir}/metalforge.sqlite",
        enabled_hardware_types=["fake-hardware", "redfish"],
        **conductor,
    )
    settings.api.port = free_port()
    settings.api.agent_host = lab.bridge.address
    settings.api.agent_port = agent_port(config)
    stack = start_stack(settings)
    server = LiveServer(stack)
    server.start()
    try:
        yield stack, server
    finally:
        server.stop()
        stack.stop()


def redfish_node_args(vnode: VirtualNode) -> list[str]:
    """``baremetal node create`` arguments for ``vnode`` behind its emulated Redfish BMC."""
    return [
        "node", "create", "--driver", "redfish", "--name", vnode.name,
        "--driver-info", f"redfish_address={vnode.redfish_address}",
        "--driver-info", f"redfish_system_id={vnode.redfish_system_id}",
        "--driver-info", "redfish_username=admin",
        "--driver-info", "redfish_password=password",
        "--boot-interface", "pxe", "--deploy-interface", "direct",
    ]  # fmt: skip


@dataclass
class AgentLab:
    """Virtual nodes running the real agent, metalforge serving them, the ``baremetal``
    CLI pointed at it and an HTTP server of images on the lab's bridge."""

    lab: Lab
    stack: Stack
    cli: BaremetalCli
    images: str
    """The image server's base URL."""
    image_dir: Path


def agent_lab(workdir: Path, config: LabConfig, **conductor: Any) -> Iterator[AgentLab]:
    """Run ``config``'s lab and metalforge for a test module (a fixture's body); the lab
    must have recorded no error when it stops."""
    require_lab()
    if not BAREMETAL.exists():
        pytest.fail("python-ironicclient's `baremetal` is part of the test dependencies")
    image_dir = workdir / "images"
    image_dir.mkdir()
    with Lab(config) as lab:
        served = served_for_lab(lab, config, workdir, **conductor)
        with served as (stack, server), image_server(image_dir, lab.bridge.address) as images:
            yield AgentLab(lab, stack, BaremetalCli(server.url), images, image_dir)
        assert not lab.errors, lab.errors
