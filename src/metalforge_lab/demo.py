"""``metalforge-lab demo``: metalforge and a few virtual nodes on one machine, ready to drive.

A newcomer should see the real flow (the BMC powering a node into the
ramdisk, the agent erasing its disk, an image written and booted) without
reading the lab's code first. The demo puts together what the end-to-end
tests put together, in the foreground:

* a lab (bridge, namespaces, loop disks, Redfish emulator) on a /24 that no
  interface of this host uses;
* a metalforge configuration in the state directory and ``metalforge
  all-in-one`` started from it as a subprocess: the operator API on
  loopback, the agents' endpoint on the bridge, a SQLite database of its own;
* every virtual node enrolled with the ``redfish`` hardware type and moved to
  ``manageable``, which proves that metalforge reaches the node's BMC, so
  that the first command a newcomer types (``provide``) is the interesting
  one;
* a small whole-disk image served on the bridge, where the agent downloads
  it from.

It then prints the ``baremetal`` commands to try and runs until SIGINT or
SIGTERM, after which it takes everything down again, also when starting
failed half-way. Every start begins with a new database: the virtual nodes
are new too (new disks, a new emulator port), so nodes left in an old
database would point at BMCs that no longer exist.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from metalforge_lab import demo_vms, namespaces, vm_nodes
from metalforge_lab.agent_ramdisk import AgentRamdisk
from metalforge_lab.agent_runner import default_ipa_python
from metalforge_lab.lab import STATE_FILE, Lab, LabConfig, VirtualNode, clean_up, runs_with

LOG = logging.getLogger(__name__)

DEFAULT_API_PORT = 6385
DEFAULT_INSPECTOR_PORT = 5050
MAX_NODES = 20
"""Each node's agent is a real Python process of its own (about 100 MB once booted)."""
READY_LINE = "metalforge demo is ready"
"""Printed once everything is up: scripts and tests wait for it."""
CONFIG_FILE = "metalforge.toml"
METALFORGE_LOG = "metalforge.log"
METALFORGE_PID = "metalforge.pid"
"""Written while metalforge runs, so a demo that was SIGKILLed can be cleaned up after."""
LAB_LOG = "lab.log"
DATABASE = "metalforge.sqlite"
IMAGE_NAME = "demo-disk.raw"
IMAGE_PARTITION = "metalforge-demo"
"""The GPT name of the image's partition: ``sgdisk -p`` on a deployed node's disk shows it."""
_IMAGE_DISK_GUID = "6D6A0C4E-1F2B-4C3D-8E9F-0A1B2C3D4E5F"
_IMAGE_PARTITION_GUID = "3E1F7A2B-5C4D-4E6F-8A9B-C0D1E2F3A4B5"
IMAGE_PORT = 8080
"""Where the image is served on the bridge when free: the same URL on every start."""
TOOLS = ("ip", "unshare", "losetup", "sgdisk", "parted", "wipefs", "shred", "blkid")
"""The lab's and the agent's commands (the ``system-packages`` make target installs them)."""
BMC_USER, BMC_PASSWORD = "admin", "password"
"""The emulator runs without authentication; driver_info still names credentials, as for a
real BMC, so the enrollment commands shown can be reused on real hardware."""
HEARTBEAT_TIMEOUT = 60
"""Seconds: an agent killed by hand fails its step within a minute, not after five."""
CALLBACK_TIMEOUT = 600
"""Seconds a node waits for its ramdisk: an agent that cannot start fails the step in ten
minutes instead of metalforge's default thirty."""
API_START_TIMEOUT = 60.0
MANAGE_TIMEOUT = 120.0
STOP_TIMEOUT = 20.0
_MIB = 1 << 20
LabT = TypeVar("LabT", Lab, vm_nodes.VmLab)
_LATEST = {"X-OpenStack-Ironic-API-Version": "latest", "Content-Type": "application/json"}
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class DemoError(RuntimeError):
    """The demo cannot start or went wrong; the message says what to do about it."""


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP: stop.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that code catching
    ``Exception`` while starting does not swallow it and ``Lab.start`` still
    takes down what it built.
    """


@dataclass(frozen=True)
class DemoOptions:
    nodes: int
    state_dir: Path
    api_port: int = DEFAULT_API_PORT
    inspector_port: int = DEFAULT_INSPECTOR_PORT
    disks_per_node: int = 1
    disk_size_mib: int = 64
    machines: str = "namespaces"
    """``namespaces`` (the agent runs in namespaces on loop disks) or ``qemu``
    (``metalforge_lab.demo_vms``: QEMU machines that network-boot the agent ramdisk)."""
    ramdisk_dir: Path = Path("var/ramdisk-cloud")
    """Where the QEMU machines' agent ramdisk is built once and kept."""


# -- checks before anything is built -----------------------------------------
def metalforge_command() -> list[str]:
    """``metalforge`` of this interpreter's environment (the virtualenv), else the module."""
    script = Path(sys.executable).with_name("metalforge")
    if os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "metalforge.cli"]


def port_in_use(host: str, port: int) -> bool:
    """Whether metalforge would fail to listen there (it binds with SO_REUSEADDR too)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def require_root() -> None:
    if os.geteuid() != 0:
        raise DemoError(
            "virtual nodes need root (a bridge, network namespaces, loop devices, mounts); "
            "run it as root, e.g. `sudo make run VIRTUAL_NODES=3`"
        )


def preflight(options: DemoOptions) -> None:
    """Refuse at once, with what to do, whatever would otherwise fail half-way or hang.

    Run after a killed demo's leftovers are gone: its metalforge would hold the port.
    """
    require_root()
    if options.machines == "qemu":
        if found := demo_vms.problems(options.nodes):
            raise DemoError("; ".join(found))
    elif not 1 <= options.nodes <= MAX_NODES:
        raise DemoError(f"--nodes must be between 1 and {MAX_NODES}, not {options.nodes}")
    _check_ports(options)
    if options.machines == "qemu":
        return
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise DemoError(f"missing tools: {', '.join(missing)} (`make system-packages`)")
    ipa_python = default_ipa_python()
    if not os.access(ipa_python, os.X_OK):
        raise DemoError(
            f"no ironic-python-agent virtualenv at {ipa_python.parent.parent} "
            "(`make run VIRTUAL_NODES=N` builds it, or `make .ipa-venv/.installed-stamp`)"
        )


def _check_ports(options: DemoOptions) -> None:
    for port, flag in (
        (options.api_port, "--api-port"),
        (options.inspector_port, "--inspector-port"),
    ):
        if port_in_use("127.0.0.1", port):
            raise DemoError(
                f"127.0.0.1:{port} is already in use (another `make run` or demo?); "
                f"stop that, or choose another port with {flag}"
            )


def stop_leftover_metalforge(state_dir: Path) -> list[str]:
    """SIGKILL the metalforge a killed demo of ``state_dir`` left running; say what was done."""
    pid_file = state_dir / METALFORGE_PID
    if not pid_file.exists():
        return []
    removed = []
    pid = int(pid_file.read_text().strip() or 0)
    config = str(state_dir.resolve() / CONFIG_FILE)
    if pid and runs_with(pid, config):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            removed.append(f"metalforge {pid}")
        # Its port is free once it is dead (a zombie holds no socket, has no command line).
        deadline = time.monotonic() + 10
        while runs_with(pid, config) and time.monotonic() < deadline:
            time.sleep(0.1)
    pid_file.unlink()
    return removed


def _clean_previous_run(state_dir: Path) -> list[str]:
    """Refuse a demo that still runs on ``state_dir``; remove what a killed one left."""
    removed = stop_leftover_metalforge(state_dir)
    removed.extend(vm_nodes.clean_up(state_dir))
    state_file = state_dir / STATE_FILE
    if state_file.exists():
        state = json.loads(state_file.read_text())
        pid = int(state.get("pid") or 0)
        if state.get("running") and pid != os.getpid() and runs_with(pid, "metalforge"):
            raise DemoError(
                f"a lab already runs on {state_dir} (process {pid}); stop it with Ctrl-C "
                f"there or `metalforge-lab down --state-dir {state_dir}`"
            )
        removed.extend(clean_up(state_file))
    for name in (DATABASE, f"{DATABASE}-wal", f"{DATABASE}-shm"):
        (state_dir / name).unlink(missing_ok=True)
    return removed


def pick_bridge() -> str:
    """``mfdemo0``, or the next name no interface of this host has: demos may run side by side."""
    for index in range(100):
        name = f"mfdemo{index}"
        if not namespaces.exists(name):
            return name
    raise DemoError("mfdemo0 to mfdemo99 all exist: remove old bridges with `ip link del`")


# -- what metalforge is given ---------------------------------------------------
def _toml(value: str | int | Sequence[str]) -> str:
    """A TOML value: JSON's strings, integers, booleans and arrays of strings are TOML's too."""
    return json.dumps(value if isinstance(value, str | int) else list(value))


Sections = dict[str, dict[str, str | int | Sequence[str]]]


def write_config(
    path: Path,
    state_dir: Path,
    api_port: int,
    agent_host: str,
    inspector_port: int,
    extra: Sections | None = None,
) -> None:
    """metalforge's settings for the demo; all paths absolute, as metalforge's cwd may differ.
    ``extra`` adds sections (the QEMU machines' DHCP service and ramdisk)."""
    sections: Sections = {
        "": {"state_dir": str(state_dir), "log_level": "INFO"},
        "api": {
            "host": "127.0.0.1",
            "port": api_port,
            "agent_host": agent_host,
            "agent_port": api_port,
        },
        "inspector": {"host": "127.0.0.1", "port": inspector_port},
        "database": {"url": f"sqlite:///{state_dir / DATABASE}"},
        "conductor": {
            "enabled_hardware_types": ["fake-hardware", "redfish"],
            "agent_heartbeat_timeout": HEARTBEAT_TIMEOUT,
            "clean_callback_timeout": CALLBACK_TIMEOUT,
            "deploy_callback_timeout": CALLBACK_TIMEOUT,
        },
    }
    for name, values in (extra or {}).items():
        sections.setdefault(name, {}).update(values)
    lines = [
        "# Written by `metalforge-lab demo` at every start: edits are lost.",
        "# The operator API stays on loopback (noauth); the agents reach metalforge",
        "# on the lab's bridge, where only lookup, heartbeat and inspection reports are served.",
    ]
    for section, values in sections.items():
        lines.append(f"\n[{section}]" if section else "")
        lines.extend(f"{key} = {_toml(value)}" for key, value in values.items())
    path.write_text("\n".join(lines) + "\n")


def make_image(path: Path) -> str:
    """A 4 MiB whole-disk image (GPT, one 2 MiB partition of text); returns its sha256.

    The agent refuses to finish writing an image without a partition table.
    The partition's name and text make a deployed disk easy to recognise.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(4 * _MIB)
    # Fixed GUIDs: the same image, and so the same checksum to copy, on every start.
    subprocess.run(
        ["sgdisk", "-U", _IMAGE_DISK_GUID, "-n", "1:2048:6143", "-c", f"1:{IMAGE_PARTITION}",
         "-u", f"1:{_IMAGE_PARTITION_GUID}", str(path)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    text = b"deployed by metalforge from the demo image\n"
    with path.open("r+b") as handle:
        handle.seek(_MIB)
        handle.write((text * (2 * _MIB // len(text) + 1))[: 2 * _MIB])
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_MIB):
            digest.update(chunk)
    return digest.hexdigest()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        LOG.info("image server: " + format, *args)


@contextlib.contextmanager
def image_server(directory: Path, host: str) -> Iterator[str]:
    """Serve ``directory`` on the bridge, where the agents download images from."""
    handler = partial(_QuietHandler, directory=str(directory))
    try:
        server = ThreadingHTTPServer((host, IMAGE_PORT), handler)
    except OSError:  # something listens on every address's port 8080
        server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="demo-images", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# -- metalforge itself -----------------------------------------------------------
class MetalforgeProcess:
    """``metalforge --config FILE all-in-one`` in a session of its own.

    Its own session keeps the terminal's Ctrl-C away from it: the demo stops
    it first, by PID, before the lab goes, so no conductor acts on a node
    that is being taken apart.
    """

    def __init__(self, config: Path, log_path: Path, pid_file: Path) -> None:
        self.config = config
        self.log_path = log_path
        self.pid_file = pid_file
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def argv(self) -> list[str]:
        return [*metalforge_command(), "--config", str(self.config), "all-in-one"]

    def start(self, no_proxy: str) -> None:
        # The demo's settings are the file's: METALFORGE_* variables would override them.
        env = {k: v for k, v in os.environ.items() if not k.startswith("METALFORGE_")}
        for name in ("no_proxy", "NO_PROXY"):
            env[name] = ",".join(filter(None, [env.get(name), no_proxy]))
        # A signal between the child's start and this object learning of it
        # would leave a metalforge nobody stops: it waits until both are done.
        with _signals_deferred(), self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            self.pid_file.write_text(f"{self.process.pid}\n")

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, url: str, timeout: float = API_START_TIMEOUT) -> None:
        """Until ``GET /v1`` answers; fail with the log's end if metalforge exits first."""
        deadline = time.monotonic() + timeout
        while True:
            code = self.exited()
            if code is not None:
                raise DemoError(
                    f"metalforge exited with code {code} while starting; the end of "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError), _NO_PROXY.open(f"{url}/v1", timeout=2) as answer:
                if answer.status == 200:
                    return
            if time.monotonic() > deadline:
                raise DemoError(f"metalforge did not answer on {url} within {timeout:.0f} s")
            time.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM (uvicorn and the conductor shut down cleanly), SIGKILL if that hangs."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                LOG.warning("metalforge did not stop in %s s: killing it", STOP_TIMEOUT)
                process.kill()
                process.wait(5)
        self.pid_file.unlink(missing_ok=True)


class Api:
    """The few operator API calls enrollment needs, with the standard library."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method, headers=_LATEST
        )
        try:
            with _NO_PROXY.open(request, timeout=30) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            raise DemoError(
                f"{method} {path}: HTTP {exc.code}: {exc.read().decode(errors='replace')}"
            ) from exc
        return json.loads(raw) if raw else None


def inspection_kernel_params(agents_url: str) -> tuple[str, ...]:
    """What a ramdisk booted for inspection is told: run the inspection collector and post
    to metalforge (a report while no inspection waits is refused; the agent goes on)."""
    return (
        f"ipa-inspection-callback-url={agents_url}/v1/continue_inspection",
        "ipa-inspection-collectors=default",
        "ipa-inspection-dhcp-wait-timeout=0",
    )


def enroll(
    api: Api, vnode: VirtualNode | vm_nodes.VmNode, fields: dict[str, Any] | None = None
) -> None:
    """What ``enroll_commands`` shows, through the API; then ``manage`` (checked by the caller).
    ``fields`` changes the boot interface and adds to ``driver_info`` (QEMU machines)."""
    fields = dict(fields or {})
    node = api.call(
        "POST",
        "/v1/nodes",
        {
            "name": vnode.name,
            "driver": "redfish",
            "driver_info": {
                "redfish_address": vnode.redfish_address,
                "redfish_system_id": vnode.redfish_system_id,
                "redfish_username": BMC_USER,
                "redfish_password": BMC_PASSWORD,
                **fields.pop("driver_info", {}),
            },
            "boot_interface": "pxe",
            "deploy_interface": "direct",
            "inspect_interface": "agent",
            **fields,
        },
    )
    api.call("POST", "/v1/ports", {"node_uuid": node["uuid"], "address": vnode.mac})
    api.call("PUT", f"/v1/nodes/{node['uuid']}/states/provision", {"target": "manage"})


def wait_manageable(api: Api, names: Sequence[str], timeout: float = MANAGE_TIMEOUT) -> None:
    """Until every node is ``manageable``; a node back in ``enroll`` failed to reach its BMC."""
    deadline = time.monotonic() + timeout
    waiting = list(names)
    while waiting:
        for name in list(waiting):
            node = api.call("GET", f"/v1/nodes/{name}")
            if node["provision_state"] == "manageable" and node["target_provision_state"] is None:
                waiting.remove(name)
            elif node["provision_state"] == "enroll" and node["last_error"]:
                raise DemoError(f"{name} could not be managed: {node['last_error']}")
        if waiting and time.monotonic() > deadline:
            raise DemoError(f"{', '.join(waiting)} not manageable within {timeout:.0f} s")
        if waiting:
            time.sleep(0.5)


# -- what the newcomer reads -------------------------------------------------------
def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it: shorter to read."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else relative


def enroll_commands(vnode: VirtualNode) -> list[str]:
    return [
        f"baremetal node create --driver redfish --name {vnode.name} \\",
        f"    --driver-info redfish_address={vnode.redfish_address} \\",
        f"    --driver-info redfish_system_id={vnode.redfish_system_id} \\",
        f"    --driver-info redfish_username={BMC_USER} "
        f"--driver-info redfish_password={BMC_PASSWORD} \\",
        "    --boot-interface pxe --deploy-interface direct --inspect-interface agent",
        f"baremetal port create {vnode.mac} --node {vnode.name}",
        f"baremetal node manage {vnode.name}",
    ]


@dataclass(frozen=True)
class Started:
    """What the next steps name."""

    lab: Lab | vm_nodes.VmLab
    metalforge: MetalforgeProcess
    api_url: str
    agent_url: str
    image_url: str
    image_sha256: str
    state_dir: Path


def next_steps_vms(started: Started, lab: vm_nodes.VmLab) -> str:
    """The QEMU machines' walk-through (``demo_vms.steps``)."""
    nodes = [f"  {node.name}  {node.mac}  disk {_shown(node.disk)}" for node in lab.nodes]
    lines = [
        "",
        f"metalforge demo: {len(lab.nodes)} QEMU machine(s), enrolled and manageable.",
        "",
        f"  operator API   {started.api_url}  (noauth, loopback only)",
        f"  agents' API    {started.agent_url}  (iPXE scripts, images, lookup, heartbeat; "
        f"bridge {lab.bridge.name} {lab.bridge.network}, where metalforge's dnsmasq answers DHCP)",
        f"  Redfish BMC    {lab.nodes[0].redfish_address}  (sushy-emulator driving QEMU)",
        f"  instance image {started.image_url}",
        f"  logs           {_shown(started.state_dir / METALFORGE_LOG)}",
        "",
        *nodes,
        "",
        "Try it, in another shell (each boot of the ramdisk takes a minute or two under",
        "software emulation):",
        "",
        f"  export OS_AUTH_TYPE=none OS_ENDPOINT={started.api_url}",
        "  baremetal node list",
        *demo_vms.steps(lab.nodes[0], started.image_url, started.image_sha256),
        "",
        "Ctrl-C stops the demo and the machines; the next start is a fresh one.",
        READY_LINE,
    ]
    return "\n".join(lines)


def next_steps(started: Started) -> str:
    if isinstance(started.lab, vm_nodes.VmLab):
        return next_steps_vms(started, started.lab)
    lab, state_dir = started.lab, started.state_dir
    first = lab.nodes[0]
    name = first.name
    root_disk = _shown(first.disks[0].backing_file)
    width = max(len(node.name) for node in lab.nodes)
    nodes = [
        f"  {node.name:<{width}}  {node.mac}  {node.address:<13}  "
        f"disk {_shown(node.disks[0].backing_file)}"
        for node in lab.nodes
    ]
    lines = [
        "",
        f"metalforge demo: {len(lab.nodes)} virtual node(s), enrolled and manageable.",
        "",
        f"  operator API   {started.api_url}  (noauth, loopback only)",
        f"  agents' API    {started.agent_url}  (lookup, heartbeat, inspection reports; bridge "
        f"{lab.bridge.name} {lab.bridge.network})",
        f"  Redfish BMCs   {first.redfish_address}  (sushy-emulator)",
        f"  sample image   {started.image_url}  (4 MiB: GPT, one partition)",
        f"  logs           {_shown(state_dir / METALFORGE_LOG)}, "
        f"{_shown(state_dir / 'agents')}/<node>/agent.log",
        "",
        *nodes,
        "",
        "They were enrolled as you would enroll a machine with a Redfish BMC:",
        "",
        *(f"  {line}" for line in enroll_commands(first)),
        "",
        "Try it, in another shell:",
        "",
        f"  export OS_AUTH_TYPE=none OS_ENDPOINT={started.api_url}",
        "  baremetal node list",
        "",
        "  # inspection: the agent reports the node's CPUs, memory, disks and NICs",
        f"  baremetal node inspect {name} --wait 300",
        "",
        '  # cleaning: the BMC boots the agent over "PXE", the agent erases the disk (~10 s)',
        f"  baremetal node provide {name} --wait 300",
        f"  baremetal node show {name} --fields driver_internal_info   # erasure_records",
        "",
        "  # deploy the sample image: the agent downloads it, checks it and writes it",
        f"  baremetal node set {name} \\",
        f"    --instance-info image_source={started.image_url} \\",
        f"    --instance-info image_checksum=sha256:{started.image_sha256}",
        f"  baremetal node deploy {name} --wait 300",
        f"  sgdisk -p {root_disk}   # the partition '{IMAGE_PARTITION}' is on its disk",
        "",
        "  # undeploy: cleaned again, back to available",
        f"  baremetal node undeploy {name} --wait 300",
        f"  baremetal node history list {name}   # every transition, step and erased disk",
        "",
        "Ctrl-C stops the demo and removes the virtual nodes; the next start is a fresh one.",
        READY_LINE,
    ]
    return "\n".join(lines)


# -- the whole thing -----------------------------------------------------------------
def _say(message: str) -> None:
    print(message, flush=True)


_deferred: dict[str, str | bool | None] = {"active": False, "signal": None}
"""A signal that arrived inside ``_signals_deferred``, raised when it ends."""


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Holds back ``Interrupted`` until the block is done (starting a child and recording it).

    The signal itself is not blocked: a child started meanwhile would inherit
    a blocked mask and could not be stopped with SIGTERM.
    """
    _deferred.update(active=True, signal=None)
    try:
        yield
    finally:
        pending = _deferred["signal"]
        _deferred.update(active=False, signal=None)
        if isinstance(pending, str):
            raise Interrupted(pending)


def _install_signal_handlers() -> None:
    """The first SIGINT/SIGTERM/SIGHUP raises ``Interrupted``; later ones are ignored.

    Ignoring them keeps a second Ctrl-C from cutting the teardown short,
    which would leave namespaces and loop devices behind.
    """

    def interrupt(signum: int, frame: FrameType | None) -> None:
        _ignore_signals()
        if _deferred["active"]:
            _deferred["signal"] = signal.Signals(signum).name
            return
        raise Interrupted(signal.Signals(signum).name)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)


def _ignore_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)


def _setup_logging(state_dir: Path) -> None:
    """Everything into ``lab.log``; only warnings onto the terminal, beside the next steps."""
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    to_file = logging.FileHandler(state_dir / LAB_LOG)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_terminal = logging.StreamHandler(sys.stderr)
    to_terminal.setLevel(logging.WARNING)
    to_terminal.setFormatter(logging.Formatter("metalforge-lab demo: %(levelname)s %(message)s"))
    root.addHandler(to_file)
    root.addHandler(to_terminal)


def _on_a_free_network(
    stack: contextlib.ExitStack, what: str, build: Callable[[str, str], LabT]
) -> LabT:
    """``build(bridge, subnet)`` on a free /24 and bridge name, started; chosen again when
    another lab took them meanwhile.

    The first choice is the same on every start (the first free /24 of
    10.251.0.0/16, ``mfdemo0``), so the addresses a newcomer sees stay put.
    """
    attempts = 3
    for attempt in range(attempts):
        subnet = namespaces.free_subnet(seed=attempt * os.getpid())
        bridge = pick_bridge()
        lab = build(bridge, subnet)
        _say(f"starting {what} on bridge {bridge} ({subnet}) ...")
        try:
            lab.start()  # takes down what it built if it fails
        except namespaces.NetworkError as exc:
            if attempt == attempts - 1:
                raise DemoError(f"could not build the lab's network: {exc}") from exc
            _say(f"  {exc}; trying another subnet and bridge name")
            continue
        stack.callback(lab.stop)
        return lab
    raise AssertionError("unreachable")


def _start_lab(options: DemoOptions, state_dir: Path, stack: contextlib.ExitStack) -> Lab:
    """The namespace lab's nodes."""

    def build(bridge: str, subnet: str) -> Lab:
        agents_url = (
            f"http://{ipaddress.IPv4Network(subnet).network_address + 1}:{options.api_port}"
        )
        return Lab(
            LabConfig(
                nodes=options.nodes,
                api_url=agents_url,
                state_dir=state_dir,
                bridge=bridge,
                subnet=subnet,
                disks_per_node=options.disks_per_node,
                disk_size_mib=options.disk_size_mib,
                extra_kernel_params=inspection_kernel_params(agents_url),
            )
        )

    return _on_a_free_network(stack, f"{options.nodes} virtual node(s)", build)


def _start_machines(
    options: DemoOptions, state_dir: Path, stack: contextlib.ExitStack
) -> vm_nodes.VmLab:
    """QEMU machines as the nodes."""
    return _on_a_free_network(
        stack,
        f"{options.nodes} QEMU machine(s)",
        lambda bridge, subnet: vm_nodes.VmLab(options.nodes, state_dir, bridge, subnet),
    )


Parts = tuple[str, str, Sections | None, dict[str, Any] | None]
"""The sample image's name and sha256, metalforge's extra settings, the enrollment fields."""


def _namespace_parts(state_dir: Path) -> Parts:
    return IMAGE_NAME, make_image(state_dir / "images" / IMAGE_NAME), None, None


def _machine_parts(state_dir: Path, lab: Lab | vm_nodes.VmLab, built: AgentRamdisk) -> Parts:
    sha256 = demo_vms.sample_image(state_dir / "images", state_dir / "instance")
    extra = demo_vms.config_sections(
        state_dir, lab.bridge.name, str(lab.bridge.network.network_address), built.kernel.parent
    )
    return demo_vms.IMAGE_NAME, sha256, extra, demo_vms.driver_fields(built)


def _start(options: DemoOptions, state_dir: Path, stack: contextlib.ExitStack) -> Started:
    """Build everything, registering each part's teardown on ``stack`` as soon as it exists."""
    qemu = options.machines == "qemu"
    lab: Lab | vm_nodes.VmLab
    built: AgentRamdisk | None = None
    if qemu:
        _say(f"the agent ramdisk in {_shown(options.ramdisk_dir)} (built once, ~90 s) ...")
        try:
            built = demo_vms.ramdisk(options.ramdisk_dir.resolve())
        except RuntimeError as exc:
            raise DemoError(str(exc)) from exc
        lab = _start_machines(options, state_dir, stack)
        agent_url = f"http://{lab.bridge.address}:{options.api_port}"
    else:
        lab = _start_lab(options, state_dir, stack)
        agent_url = lab.config.api_url
    subnet = lab.bridge.network
    agent_host = lab.bridge.address
    api_url = f"http://127.0.0.1:{options.api_port}"

    _say("writing the sample image ...")
    image_name, image_sha256, extra, fields = (
        _machine_parts(state_dir, lab, built) if built else _namespace_parts(state_dir)
    )
    image_base = stack.enter_context(image_server(state_dir / "images", agent_host))

    config = state_dir / CONFIG_FILE
    write_config(config, state_dir, options.api_port, agent_host, options.inspector_port, extra)
    metalforge = MetalforgeProcess(config, state_dir / METALFORGE_LOG, state_dir / METALFORGE_PID)
    _say(f"starting {' '.join(metalforge.argv)} (log: {_shown(metalforge.log_path)}) ...")
    stack.callback(metalforge.stop)
    metalforge.start(no_proxy=f"127.0.0.1,localhost,{subnet}")
    metalforge.wait_ready(api_url)

    boot = "ipxe" if qemu else "pxe"
    _say(f"enrolling {', '.join(node.name for node in lab.nodes)} (redfish, {boot}, direct) ...")
    api = Api(api_url)
    for vnode in lab.nodes:
        enroll(api, vnode, fields)
    wait_manageable(api, [node.name for node in lab.nodes])
    started = Started(
        lab=lab,
        metalforge=metalforge,
        api_url=api_url,
        agent_url=agent_url,
        image_url=f"{image_base}/{image_name}",
        image_sha256=image_sha256,
        state_dir=state_dir,
    )
    return started


def run(options: DemoOptions) -> int:
    """Start, print the next steps, wait for a signal, tear down. Returns the exit code.

    2: refused before anything was built; 1: failed (and torn down); 0: stopped by a signal.
    """
    try:
        require_root()
        state_dir = options.state_dir.resolve()
        state_dir.mkdir(parents=True, exist_ok=True)
        for item in _clean_previous_run(state_dir):
            _say(f"removed leftover {item} of an earlier demo")
        preflight(options)
    except DemoError as exc:
        print(f"metalforge-lab demo: {exc}", file=sys.stderr)
        return 2
    _setup_logging(state_dir)
    _install_signal_handlers()
    try:
        with contextlib.ExitStack() as stack:
            try:
                started = _start(options, state_dir, stack)
                _say(next_steps(started))
                _watch(started.lab, started.metalforge)
            finally:
                _ignore_signals()
                _say("stopping: metalforge, the image server, the virtual nodes ...")
    except Interrupted:
        pass
    except DemoError as exc:
        print(f"metalforge-lab demo: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the CLI's last resort: the log has the traceback
        LOG.exception("the demo failed")
        print(
            f"metalforge-lab demo: {exc}\n(`metalforge-lab down --state-dir "
            f"{_shown(state_dir)}` removes whatever is left; details in "
            f"{_shown(state_dir / LAB_LOG)})",
            file=sys.stderr,
        )
        return 1
    _say("stopped; nothing of the demo is left running.")
    return 0


def _watch(lab: Lab | vm_nodes.VmLab, metalforge: MetalforgeProcess) -> None:
    """Wait for a signal; report the lab's errors as they come; stop if metalforge dies."""
    reported = 0
    while True:
        for error in lab.errors[reported:]:
            LOG.warning("virtual node: %s", error)
        reported = len(lab.errors)
        code = metalforge.exited()
        if code is not None:
            raise DemoError(
                f"metalforge exited with code {code}; the end of {metalforge.log_path}:\n"
                f"{metalforge.log_tail()}"
            )
        time.sleep(1)
