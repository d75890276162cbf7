"""The virtual lab: Redfish systems whose power-on boots the real ironic-python-agent.

A virtual node is a system of sushy-tools' stock emulator (fake driver) plus
a network namespace and loop-device disks on this host. The emulator's own
``external_notifier`` PUTs a system's dict to the lab on every change; the
lab plays the machine's firmware:

* power goes On with boot device ``Pxe``, or ``Cd`` with media inserted:
  the "ramdisk" boots, i.e. the agent starts in the node's namespaces;
* power goes Off: the agent is SIGKILLed, as pulled power would;
* a restart shows as Off (with a pending restart) and then On, so the agent
  is killed and started again;
* power goes On with boot device ``Hdd``: the node "boots its instance";
  no agent runs and the lab records the boot (``instance_boots``).

The fake driver only applies a pending power change when the system is read,
as if the machine waited for someone to look; a real machine powers on by
itself, so the lab reads the system when the change is due.

``Lab`` is used from tests as a context manager; ``metalforge-lab up`` runs
one in the foreground and writes what clients need into ``lab.json``.
"""

from __future__ import annotations

import functools
import heapq
import ipaddress
import json
import logging
import os
import queue
import signal
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from metalforge_lab import loopdev, namespaces
from metalforge_lab.agent_runner import AgentProcess, AgentSettings, default_ipa_python
from metalforge_lab.ports import free_port
from metalforge_lab.redfish_emulator import EmulatorProcess, FakeSystem
from metalforge_lab.running import StartStop

LOG = logging.getLogger(__name__)

STATE_FILE = "lab.json"
"""Written into the state directory on every change; ``metalforge-lab down`` reads it."""

OFF = "off"
AGENT = "agent"
"""Powered on and booted into the ramdisk: the agent runs."""
INSTANCE = "instance"
"""Powered on and booted from its disk: no agent, the deployed instance "runs"."""
NO_BOOT_DEVICE = "no-boot-device"
"""Powered on with a boot device that has nothing to boot (e.g. ``Cd`` without media)."""

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class LabConfig:
    """One lab; names and subnet differ between labs that run at the same time."""

    nodes: int
    api_url: str
    """metalforge's agents' endpoint as the agent reaches it (an address on the bridge)."""
    state_dir: Path
    bridge: str = "mflab0"
    """Host bridge name; the namespaces and veths are named after it."""
    subnet: str = "10.251.0.0/24"
    """The bridge takes the first address, node i the (i + 2)th."""
    disks_per_node: int = 1
    disk_size_mib: int = 64
    emulator_port: int = 0
    """0 picks a free port."""
    power_delay: tuple[int, int] = (0, 0)
    """Seconds (low, high) the emulator takes to apply a power change."""
    insecure: bool = True
    lookup_timeout: int = 300
    extra_kernel_params: Sequence[str] = ()
    ipa_python: Path = field(default_factory=default_ipa_python)


@dataclass
class VirtualNode:
    """One node: what metalforge enrols (BMC address, system id, MAC) and what the lab tracks."""

    index: int
    name: str
    system_uuid: str
    mac: str
    address: str
    network: namespaces.NodeNetwork
    disks: list[loopdev.LoopDisk]
    redfish_address: str
    power_state: str = "Off"
    boot_device: str = "Hdd"
    status: str = OFF
    agent_starts: int = 0
    instance_boots: int = 0
    resets: list[str] = field(default_factory=list)
    """The Redfish resets the node's BMC was asked for, in order (``ForceOff``...)."""
    agent: AgentProcess | None = None

    @property
    def redfish_system_id(self) -> str:
        return f"/redfish/v1/Systems/{self.system_uuid}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "redfish_address": self.redfish_address,
            "redfish_system_id": self.redfish_system_id,
            "system_uuid": self.system_uuid,
            "mac": self.mac,
            "address": self.address,
            "namespace": self.network.namespace,
            "host_veth": self.network.host_veth,
            "disks": [d.device for d in self.disks],
            "disk_files": [str(d.backing_file) for d in self.disks],
            "power_state": self.power_state,
            "boot_device": self.boot_device,
            "status": self.status,
            "agent_starts": self.agent_starts,
            "instance_boots": self.instance_boots,
            "resets": self.resets,
            "agent_pid": self.agent.agent_pid() if self.agent is not None else None,
            "agent_log": str(self.agent.log_path) if self.agent is not None else None,
        }


class _Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, events: queue.Queue[dict[str, Any] | None]) -> None:
        self.events = events
        super().__init__(("127.0.0.1", 0), _NotificationHandler)


class _NotificationHandler(BaseHTTPRequestHandler):
    """Takes the emulator's notification and answers at once: the emulator waits for it."""

    server: _Receiver

    def do_PUT(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            system = json.loads(self.rfile.read(length))
        except ValueError:
            self.send_response(400)
        else:
            self.server.events.put(system)
            self.send_response(204)
        self.end_headers()

    do_POST = do_PUT

    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("notification: " + format, *args)


class Lab(StartStop):
    """Bridge, namespaces, disks, emulator and notification handling for ``config.nodes`` nodes."""

    def __init__(self, config: LabConfig) -> None:
        self.config = config
        self.state_dir = config.state_dir
        self.bridge = namespaces.Bridge(config.bridge, ipaddress.IPv4Network(config.subnet))
        self.nodes: list[VirtualNode] = []
        self.emulator: EmulatorProcess | None = None
        self._events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._receiver: _Receiver | None = None
        self._threads: list[threading.Thread] = []
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._bridge_created = False
        self.errors: list[str] = []
        """Failures while handling notifications (an agent that would not start, ...)."""

    # -- naming -------------------------------------------------------------
    def _mac(self, index: int) -> str:
        third = self.bridge.network.network_address.packed[2]
        return f"52:54:00:fb:{third:02x}:{index + 1:02x}"

    def _node(self, index: int, emulator_address: str) -> VirtualNode:
        prefix = self.config.bridge
        network = namespaces.NodeNetwork(
            namespace=f"{prefix}-n{index}",
            host_veth=f"{prefix[:10]}v{index}",
            mac=self._mac(index),
            address=str(self.bridge.network.network_address + 2 + index),
            prefixlen=self.bridge.network.prefixlen,
        )
        system_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"metalforge-lab:{prefix}:{index}"))
        return VirtualNode(
            index=index,
            name=f"{prefix}-node-{index}",
            system_uuid=system_uuid,
            mac=network.mac,
            address=network.address,
            network=network,
            disks=[],
            redfish_address=emulator_address,
        )

    # -- lifecycle ----------------------------------------------------------
    def start(self) -> None:
        """Build everything; on any failure, take down what was built and re-raise."""
        try:
            self._start()
        except BaseException:  # Ctrl-C mid-build too: take down what was built
            self.stop()
            raise

    def _start(self) -> None:
        config = self.config
        if config.nodes < 1 or config.nodes > self.bridge.network.num_addresses - 3:
            raise ValueError(f"{config.nodes} nodes do not fit in {self.bridge.network}")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        port = config.emulator_port or free_port()
        emulator_address = f"http://127.0.0.1:{port}"
        self.bridge.create()
        self._bridge_created = True
        for index in range(config.nodes):
            node = self._node(index, emulator_address)
            self.nodes.append(node)
            node.network.create(self.bridge)
            for disk in range(config.disks_per_node):
                backing = self.state_dir / "disks" / f"{node.name}-disk{disk}.img"
                node.disks.append(loopdev.attach(backing, config.disk_size_mib << 20))
            node.agent = AgentProcess(
                node.network.namespace,
                node.disks,
                AgentSettings(
                    api_url=config.api_url,
                    insecure=config.insecure,
                    lookup_timeout=config.lookup_timeout,
                    extra_kernel_params=config.extra_kernel_params,
                    ipa_python=config.ipa_python,
                ),
                self.state_dir / "agents" / node.name,
            )
        self._receiver = _Receiver(self._events)
        receiver_url = f"http://127.0.0.1:{self._receiver.server_address[1]}/notify"
        self._spawn(self._receiver.serve_forever, "lab-notifications")
        self._spawn(self._handle_events, "lab-events")
        self._spawn(self._watch_power_requests, "lab-power-requests")
        self.emulator = EmulatorProcess(
            self.state_dir / "redfish",
            port,
            [
                FakeSystem(
                    uuid=node.system_uuid,
                    name=node.name,
                    macs=[node.mac],
                    external_notifier=True,
                )
                for node in self.nodes
            ],
            power_delay=config.power_delay,
            notification_url=receiver_url,
        )
        self.emulator.start()
        self.write_state()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        """Take everything down, each part even if another part fails; re-raise the first error."""
        failures: list[BaseException] = []

        def attempt(action: Callable[[], None]) -> None:
            try:
                action()
            except Exception as exc:  # each part is taken down even if another failed
                LOG.exception("lab teardown step failed")
                failures.append(exc)

        self._stopping.set()
        if self.emulator is not None:
            attempt(self.emulator.stop)
        if self._receiver is not None:
            attempt(self._receiver.shutdown)
            attempt(self._receiver.server_close)
        self._events.put(None)
        for thread in self._threads:
            thread.join(10)
        self._threads.clear()
        for node in self.nodes:
            if node.agent is not None:
                attempt(node.agent.stop)
            attempt(node.network.delete)
            for disk in node.disks:
                attempt(functools.partial(loopdev.release, disk.backing_file))
        if self._bridge_created:
            attempt(self.bridge.delete)
        attempt(self._write_stopped_state)
        if failures:
            raise failures[0]

    # -- notifications ------------------------------------------------------
    def _handle_events(self) -> None:
        """Apply notifications in order; read systems whose pending power change is due."""
        due: list[tuple[float, str]] = []
        while True:
            timeout = max(0.0, due[0][0] - time.time()) if due else None
            try:
                system = self._events.get(timeout=timeout)
            except queue.Empty:
                system = {}
            if system is None:
                return
            if system:
                try:
                    pending = self._apply(system)
                except Exception as exc:  # one bad notification must not end this thread
                    LOG.exception("handling a notification failed")
                    self.errors.append(f"{system.get('name')}: {exc}")
                    pending = None
                if pending is not None:
                    heapq.heappush(due, (pending, str(system["uuid"])))
            while due and due[0][0] <= time.time():
                _, system_uuid = heapq.heappop(due)
                self._read_system(system_uuid)

    def _watch_power_requests(self) -> None:
        """An agent that runs ``poweroff``/``reboot`` switches its system through the BMC.

        That is what the machine itself would do; the emulator then notifies
        the power change like any other, and the agent is stopped or restarted.
        """
        stopping = self._stopping
        while not stopping.wait(0.2):
            for node in self.nodes:
                action = node.agent.take_power_request() if node.agent is not None else None
                if action is None or self.emulator is None:
                    continue
                reset = {"off": "ForceOff", "restart": "ForceRestart"}.get(action)
                if reset is None:
                    continue
                request = urllib.request.Request(
                    f"{self.emulator.address}{node.redfish_system_id}/Actions/ComputerSystem.Reset",
                    data=json.dumps({"ResetType": reset}).encode(),
                    headers={"Content-Type": "application/json"},
                    method="POST",
                )
                try:
                    with _NO_PROXY.open(request, timeout=10) as answer:
                        answer.read()
                except OSError as exc:
                    self.errors.append(f"{node.name}: the agent's {action} failed: {exc}")

    def _read_system(self, system_uuid: str) -> None:
        """A GET makes the fake driver apply a due power change (and notify us of it)."""
        if self.emulator is None:
            return
        url = f"{self.emulator.address}/redfish/v1/Systems/{system_uuid}"
        try:
            with _NO_PROXY.open(url, timeout=10) as answer:
                answer.read()
        except OSError as exc:
            LOG.warning("could not read %s: %s", url, exc)

    def _by_uuid(self, system_uuid: str) -> VirtualNode | None:
        return next((n for n in self.nodes if n.system_uuid == system_uuid), None)

    def _apply(self, system: dict[str, Any]) -> float | None:
        """Act on one notified system state; returns when its pending power change is due."""
        node = self._by_uuid(str(system.get("uuid")))
        if node is None:
            return None
        power = str(system.get("power_state", "Off"))
        boot_device = str(system.get("boot_device") or "Hdd")
        with self._changed:
            was_on = node.power_state == "On"
            node.boot_device = boot_device
            node.power_state = power
            node.resets = [str(reset) for reset in system.get("resets") or ()]
            if was_on and power != "On":
                self._power_off(node)
            elif power == "On" and not was_on:
                self._boot(node, boot_device, _media_inserted(system, "Cd"))
            self._changed.notify_all()
        self.write_state()
        pending = system.get("pending_power")
        if isinstance(pending, dict):
            return float(pending.get("apply_time") or 0)
        return None

    def _power_off(self, node: VirtualNode) -> None:
        if node.agent is not None:
            node.agent.stop()
        node.status = OFF

    def _boot(self, node: VirtualNode, boot_device: str, cd_inserted: bool) -> None:
        if boot_device == "Pxe" or (boot_device == "Cd" and cd_inserted):
            assert node.agent is not None
            node.agent.start()
            node.agent_starts += 1
            node.status = AGENT
        elif boot_device == "Hdd":
            node.instance_boots += 1
            node.status = INSTANCE
        else:
            node.status = NO_BOOT_DEVICE

    # -- state for clients --------------------------------------------------
    def wait_for(
        self,
        condition: Callable[[], bool],
        timeout: float = 30.0,
        message: str = "lab condition",
    ) -> None:
        """Block until ``condition()`` (evaluated under the lab's lock) holds, or time out."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{message} not reached within {timeout} s")
                self._changed.wait(min(remaining, 0.2))

    def describe(self) -> dict[str, Any]:
        """What ``lab.json`` holds: the manager's PID, the bridge and every node."""
        return {
            "pid": os.getpid(),
            "running": True,
            "bridge": self.bridge.name,
            "bridge_address": self.bridge.address,
            "subnet": str(self.bridge.network),
            "api_url": self.config.api_url,
            "emulator_log": str(self.emulator.log_path) if self.emulator else None,
            "emulator_pid": self.emulator.process.pid
            if self.emulator is not None and self.emulator.process is not None
            else None,
            "emulator_workdir": str(self.state_dir / "redfish"),
            "nodes": [node.as_dict() for node in self.nodes],
        }

    def write_state(self) -> None:
        self._write(self.describe())

    def _write_stopped_state(self) -> None:
        if self.state_dir.exists():
            self._write({**self.describe(), "running": False})

    def _write(self, state: dict[str, Any]) -> None:
        path = self.state_dir / STATE_FILE
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(state, indent=2) + "\n")
        partial.replace(path)


def _media_inserted(system: dict[str, Any], device: str) -> bool:
    """The fake driver keeps ``boot_image[device] = [image, write_protected, inserted]``."""
    images = system.get("boot_image") or {}
    entry = images.get(device)
    return bool(entry and len(entry) > 2 and entry[2])


def runs_with(pid: int, argument: str) -> bool:
    """Whether process ``pid`` still has ``argument`` in its command line (PIDs get reused)."""
    try:
        return argument.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def kill_leftover(what: str, pid: int, argument: str) -> list[str]:
    """SIGKILL ``pid`` if it still runs with ``argument`` (PIDs get reused); ``[what pid]``
    when it did, for the caller to report."""
    if not pid or not runs_with(pid, argument):
        return []
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return []
    return [f"{what} {pid}"]


def clean_up(state_file: Path) -> list[str]:
    """Remove what a lab described in ``state_file`` left behind (after its manager died).

    Returns what was removed, for the caller to report.
    """
    state = json.loads(state_file.read_text())
    removed = kill_leftover(
        "emulator", int(state.get("emulator_pid") or 0), str(state.get("emulator_workdir"))
    )
    for node in state.get("nodes", []):
        network = namespaces.NodeNetwork(node["namespace"], node["host_veth"], "", "", 0)
        if network.namespace in namespaces.namespaces() or namespaces.exists(network.host_veth):
            removed.extend(f"process {pid}" for pid in network.processes())
            network.delete()
            removed.append(network.namespace)
        for backing in node.get("disk_files", []):
            if Path(backing).exists():
                loopdev.release(Path(backing))
                removed.append(backing)
    bridge = state.get("bridge")
    if bridge and namespaces.exists(bridge):
        namespaces.ip("link", "del", bridge)
        removed.append(bridge)
    return removed
