"""A Redfish BMC for tests and the lab: sushy-tools' stock emulator, fake systems driver.

The stock ``sushy-emulator`` app serves the real Redfish routes; this module
only prepares it, in its own process:

* the fake driver's power changes land after ``random.randint(1, 11)``
  seconds; here the delay range is chosen (default ``0,0``: the change shows
  on the next GET, which keeps tests fast; ``2,5`` exercises polling);
* the stock fake driver answers "not supported" for an NMI (``Reset`` with
  ``Nmi``); a lab system takes one while it is powered on, else answers 400;
* the stock UpdateService updates a BIOS at once and points at a task monitor it
  does not serve; here that monitor answers with the finished task;
* the stock fake driver answers "not supported" for BIOS, processors, memory
  and storage, so drivers could not be tested on those routes. ``LabFakeDriver``
  keeps them in the fake system's dict, as the stock driver keeps the boot
  device, so they survive restarts of the emulator with the same state dir.

A system in ``SUSHY_EMULATOR_FAKE_SYSTEMS`` may carry, besides the stock keys
(``uuid``, ``name``, ``power_state``, ``nics``, ``external_notifier``):
``processors`` (list of ``{id, socket, vendor, model, cores, threads}``),
``memory_gib``, ``bios`` (current attributes), ``bios_defaults`` (what a BIOS
reset restores), ``bios_version`` (what the stock UpdateService bumps) and
``disks`` (list of ``{name, size_gib}``; without it the system has no
SimpleStorage, like a BMC that does not report disks) and ``storage`` (a
RAID controller whose volumes can be created and deleted:
``metalforge_lab.redfish_storage``) and ``dell`` (its manager is an iDRAC
with Dell's OEM extensions: ``metalforge_lab.redfish_dell``).

A system with ``machine`` (``{tap, bridge, console, uefi, disk,
memory_mib}``) is a real QEMU machine (``metalforge_lab.vm``) rather than a
record: powering it on starts the machine on the lab's bridge, booting what
its boot device says (``Pxe``: the network; ``Cd``: the image inserted as
virtual media, which the emulator downloaded; ``Hdd``: its disk, a raw
file); powering it off, or the machine powering itself off or rebooting,
stops it, and its power state is whether it runs. The emulator then needs
root.

Use ``EmulatorProcess`` from Python, or run
``python -m metalforge_lab.redfish_emulator --config FILE [--power-delay LO,HI]``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from metalforge_lab import redfish_dell, redfish_events, redfish_storage
from metalforge_lab.running import StartStop

DEFAULT_BIOS_VERSION = "1.0.0"
"""A fake system's ``BiosVersion`` until an update bumps it (the stock UpdateService adds one
to the second number)."""

DEFAULT_BIOS: dict[str, Any] = {
    "BootMode": "Uefi",
    "EmbeddedSata": "Raid",
    "NicBoot1": "NetworkBoot",
    "ProcTurboMode": "Enabled",
}
"""Factory BIOS attributes of a fake system that does not list its own."""

DEFAULT_PROCESSORS: list[dict[str, Any]] = [
    {
        "id": "CPU0",
        "socket": "CPU 0",
        "vendor": "Lab CPUs Inc.",
        "model": "Fake x86-64 8-core",
        "cores": 4,
        "threads": 8,
    }
]
DEFAULT_MEMORY_GIB = 16


@dataclass
class FakeSystem:
    """One fake system the emulator serves."""

    uuid: str
    name: str
    power_state: str = "Off"
    macs: Sequence[str] = ()
    processors: list[dict[str, Any]] = field(
        default_factory=lambda: copy.deepcopy(DEFAULT_PROCESSORS)
    )
    memory_gib: int = DEFAULT_MEMORY_GIB
    bios: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_BIOS))
    disks_gib: Sequence[int] = ()
    """Disk sizes; empty means the BMC reports no storage."""
    external_notifier: bool = False
    """Send sushy-tools' external notification (a PUT of the system) on every change."""
    machine: dict[str, Any] | None = None
    """``{tap, bridge, console, uefi, disk, memory_mib}``: a QEMU machine behind this BMC
    (module doc); ``disk`` is a raw file the machine sees as its virtio disk."""
    storage: dict[str, Any] | None = None
    """A RAID controller with its drives and volumes (``metalforge_lab.redfish_storage``)."""
    dell: bool = False
    """Its manager is an iDRAC with Dell's OEM extensions (``metalforge_lab.redfish_dell``)."""

    def as_config(self) -> dict[str, Any]:
        system: dict[str, Any] = {
            "uuid": self.uuid,
            "name": self.name,
            "power_state": self.power_state,
            "external_notifier": self.external_notifier,
            "nics": [{"mac": mac, "ip": ""} for mac in self.macs],
            "processors": self.processors,
            "memory_gib": self.memory_gib,
            "bios": self.bios,
            "bios_defaults": dict(self.bios),
        }
        if self.machine is not None:
            system["machine"] = self.machine
        if self.storage is not None:
            system["storage"] = self.storage
        if self.dell:
            system["dell"] = True
        if self.disks_gib:
            system["disks"] = [
                {"name": f"disk{i}", "size_gib": size} for i, size in enumerate(self.disks_gib)
            ]
        return system


@dataclass
class EmulatorConfig:
    """Everything one emulator instance needs; ``write`` renders its Python config file."""

    port: int
    state_dir: Path
    systems: Sequence[FakeSystem]
    auth_file: Path | None = None
    notification_url: str | None = None
    """Where the stock external notification PUTs a system after a change."""
    event_service: bool = False
    """Serve an EventService with subscriptions (``metalforge_lab.redfish_events``)."""

    def render(self) -> str:
        lines = [
            "# Written by metalforge_lab.redfish_emulator; read by flask's from_pyfile.",
            "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'",
            f"SUSHY_EMULATOR_LISTEN_PORT = {self.port!r}",
            "SUSHY_EMULATOR_FAKE_DRIVER = True",
            f"SUSHY_EMULATOR_STATE_DIR = {str(self.state_dir)!r}",
            f"SUSHY_EMULATOR_FAKE_SYSTEMS = {[s.as_config() for s in self.systems]!r}",
        ]
        if self.auth_file is not None:
            lines.append(f"SUSHY_EMULATOR_AUTH_FILE = {str(self.auth_file)!r}")
        if self.notification_url is not None:
            lines.append(f"EXTERNAL_NOTIFICATION_URL = {self.notification_url!r}")
        if self.event_service:
            lines.append("LAB_EVENT_SERVICE = True")
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        path.write_text(self.render())


def write_htpasswd(path: Path, users: dict[str, str]) -> None:
    """An auth file for the emulator's Basic auth (it accepts bcrypt hashes only)."""
    import bcrypt

    lines = [
        f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()}"
        for user, password in users.items()
    ]
    path.write_text("\n".join(lines) + "\n")


class EmulatorError(RuntimeError):
    """The emulator did not start or answer."""


class EmulatorProcess(StartStop):
    """``sushy-emulator`` in a subprocess, with its own state and temporary directories.

    Everything lives under ``workdir``; ``stop`` removes what the emulator
    wrote (state, downloaded images) but keeps ``emulator.log`` for a failed
    test to show.
    """

    def __init__(
        self,
        workdir: Path,
        port: int,
        systems: Sequence[FakeSystem],
        *,
        users: dict[str, str] | None = None,
        power_delay: tuple[int, int] = (0, 0),
        notification_url: str | None = None,
        event_service: bool = False,
    ) -> None:
        self.workdir = workdir
        self.port = port
        self.systems = list(systems)
        self.users = users
        self.power_delay = power_delay
        self.notification_url = notification_url
        self.event_service = event_service
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """The BMC address a node's ``redfish_address`` names."""
        return f"http://127.0.0.1:{self.port}"

    def system_path(self, uuid: str) -> str:
        """The ``redfish_system_id`` of a system."""
        return f"/redfish/v1/Systems/{uuid}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "emulator.log"

    def start(self, timeout: float = 20.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for sub in ("state", "tmp"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)
            (self.workdir / sub).mkdir()
        auth_file = None
        if self.users:
            auth_file = self.workdir / "htpasswd"
            write_htpasswd(auth_file, self.users)
        config_path = self.workdir / "emulator.conf"
        EmulatorConfig(
            port=self.port,
            state_dir=self.workdir / "state",
            systems=self.systems,
            auth_file=auth_file,
            notification_url=self.notification_url,
            event_service=self.event_service,
        ).write(config_path)
        low, high = self.power_delay
        command = [
            sys.executable,
            "-m",
            "metalforge_lab.redfish_emulator",
            "--config",
            str(config_path),
            "--power-delay",
            f"{low},{high}",
        ]
        env = {**os.environ, "TMPDIR": str(self.workdir / "tmp")}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL
            )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise EmulatorError(f"sushy-emulator exited at start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.address}/redfish/v1/", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise EmulatorError(
                    f"sushy-emulator did not answer on {self.address} within {timeout} s"
                )
            time.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        for sub in ("state", "tmp"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)


# -- inside the emulator process -------------------------------------------


class _DelayRandom:
    """Stands in for ``random`` in the fake driver, which only calls ``randint(1, 11)``."""

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def randint(self, a: int, b: int) -> int:
        return random.randint(self.low, self.high)


class _LabResources:
    """BIOS, NMI, processors, memory and storage for sushy-tools' fake driver.

    A mixin, written at module level rather than inside ``_lab_driver``, whose
    next base is the stock fake driver: that class exists only once sushy-tools
    is imported, in the emulator process, so ``_lab_driver`` joins the two there.
    """

    _error: ClassVar[Any]
    """``sushy_tools.error``, whose exceptions the emulator turns into HTTP answers."""
    _get: Callable[[str], dict[str, Any]]
    """The stock driver's: the fake system ``identity`` names, as its dict."""
    _update: Callable[..., None]
    """The stock driver's: store ``system`` with the given keys changed."""

    def get_bios(self, identity: str) -> dict[str, Any]:
        return dict(self._get(identity).get("bios") or DEFAULT_BIOS)

    def set_bios(self, identity: str, attributes: Any) -> None:
        system = self._get(identity)
        if not isinstance(attributes, dict):
            raise self._error.BadRequest("BIOS Attributes must be an object")
        current = self.get_bios(identity)
        unknown = sorted(set(attributes) - set(current))
        if unknown:
            raise self._error.BadRequest(f"Unknown BIOS attribute(s): {', '.join(unknown)}")
        self._update(system, bios={**current, **attributes})

    def reset_bios(self, identity: str) -> None:
        system = self._get(identity)
        self._update(system, bios=dict(system.get("bios_defaults") or DEFAULT_BIOS))

    def _nmi(self, identity: str) -> None:
        system = self._get(identity)
        if system.get("power_state") != "On":
            raise self._error.BadRequest("an NMI needs the system powered on")
        self._update(system, nmis=int(system.get("nmis", 0)) + 1)

    def get_versions(self, identity: str) -> dict[str, str]:
        return {"BiosVersion": str(self._get(identity).get("bios_version") or DEFAULT_BIOS_VERSION)}

    def set_versions(self, identity: str, firmware_versions: dict[str, str]) -> None:
        """What the stock UpdateService writes after an (instant) BIOS update."""
        system = self._get(identity)
        self._update(system, bios_version=str(firmware_versions["BiosVersion"]))

    def get_processors(self, identity: str) -> list[dict[str, Any]]:
        return list(self._get(identity).get("processors") or DEFAULT_PROCESSORS)

    def get_total_cpus(self, identity: str) -> int:
        return sum(int(p.get("threads", 1)) for p in self.get_processors(identity))

    def get_total_memory(self, identity: str) -> int:
        return int(self._get(identity).get("memory_gib") or DEFAULT_MEMORY_GIB)

    def get_simple_storage_collection(self, identity: str) -> dict[str, Any]:
        disks = self._get(identity).get("disks")
        if not disks:
            raise self._error.NotSupportedError("this fake system reports no storage")
        devices = [
            {"Name": d["name"], "CapacityBytes": int(d["size_gib"]) * 1024**3} for d in disks
        ]
        return {"ctl0": {"Id": "ctl0", "Name": "ctl0", "DeviceList": devices}}


def _lab_driver(base: Any, error: Any) -> Any:
    """The stock fake driver plus BIOS, processors, memory and storage (see module doc)."""

    class LabFakeDriver(_LabResources, base):  # type: ignore[misc]
        _error = error

        def set_power_state(self, identity: str, state: str) -> None:
            """The stock driver refuses ``Nmi`` (501); a lab system takes it while on. A
            system with a machine starts and stops it."""
            system = self._get(identity)
            if system.get("machine") is not None and state != "Nmi":
                _MACHINES.set_power(system, state)
                self._update(system, power_state=_MACHINES.power_state(system))
                return
            if state != "Nmi":
                # Every reset asked for, in order: what a test checks a flow never did
                # (a node with ``disable_power_off`` is never sent ``ForceOff``).
                self._update(system, resets=[*system.get("resets", []), state])
                storage = redfish_storage.applied_at_reset(system.get("storage") or {}, state)
                if storage is not None:
                    self._update(system, storage=storage)
                super().set_power_state(identity, state)
                return
            self._nmi(identity)

        def set_boot_image(self, identity: str, device: str, **kwargs: Any) -> None:
            """The stock driver's, remembering whose image it was: the emulator's
            ``HttpBootUri`` handling then stores the URI without saying for whom."""
            self._http_boot_for = identity
            super().set_boot_image(identity, device, **kwargs)

        def set_http_boot_uri(self, uri: str) -> None:
            self._update(self._get(self._http_boot_for), http_boot_uri=uri)

        def get_http_boot_uri(self, identity: str) -> str | None:
            uri: str | None = self._get(identity).get("http_boot_uri")
            return uri

        def get_power_state(self, identity: str) -> str:
            system = self._get(identity)
            if system.get("machine") is not None:
                return _MACHINES.power_state(system)
            state: str = super().get_power_state(identity)
            return state

    return LabFakeDriver


class _Machines:
    """The QEMU machines behind this emulator's systems, by system UUID."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, Any] = {}

    def power_state(self, system: dict[str, Any]) -> str:
        with self._lock:
            machine = self._running.get(system["uuid"])
            alive = machine is not None and machine.process.poll() is None
        return "On" if alive else "Off"

    def set_power(self, system: dict[str, Any], state: str) -> None:
        if state in ("On", "ForceOn"):
            if self.power_state(system) == "Off":
                self._start(system)
        elif state in ("ForceOff", "GracefulShutdown"):
            self._stop(system)
        elif state in ("ForceRestart", "GracefulRestart", "PowerCycle"):
            self._stop(system)
            self._start(system)

    def _start(self, system: dict[str, Any]) -> None:
        from metalforge_lab import vm

        self._stop(system)
        spec = system["machine"]
        image, _protected, inserted = (system.get("boot_image") or {}).get(
            "Cd", (None, False, False)
        )
        cdrom = Path(image) if inserted and image else None
        disk = Path(spec["disk"]) if spec.get("disk") else None
        machine = vm.NetbootVm(
            spec["tap"],
            system["nics"][0]["mac"],
            spec["bridge"],
            Path(spec["console"]),
            memory_mib=int(spec.get("memory_mib", 512)),
            cdrom=cdrom,
            uefi=bool(spec.get("uefi")),
            disk=disk,
            boot=_boot_target(system.get("boot_device"), cdrom, disk),
        )
        machine.power_on()
        with self._lock:
            self._running[system["uuid"]] = machine

    def _stop(self, system: dict[str, Any]) -> None:
        with self._lock:
            machine = self._running.pop(system["uuid"], None)
        if machine is not None:
            machine.power_off()

    def stop_all(self) -> None:
        with self._lock:
            machines, self._running = list(self._running.values()), {}
        for machine in machines:
            machine.power_off()


_MACHINES = _Machines()


def _boot_target(device: str | None, cdrom: Path | None, disk: Path | None) -> str:
    """What the machine boots for the BMC's boot device: as a server's firmware falls back
    to the next device, a missing disk or CD means the network."""
    if device == "Cd" and cdrom is not None:
        return "cd"
    if device == "Hdd" and disk is not None:
        return "disk"
    return "network"


def _finished_task(task_id: str) -> Any:
    """The task the stock UpdateService points at (its updates finish before it answers):
    completed, as a BMC's task monitor shows a finished update."""
    import flask

    return flask.jsonify(
        {
            "@odata.id": f"/redfish/v1/TaskService/Tasks/{task_id}",
            "@odata.type": "#Task.v1_4_3.Task",
            "Id": task_id,
            "Name": "Firmware update",
            "TaskState": "Completed",
            "TaskStatus": "OK",
            "Messages": [],
        }
    )


def install(power_delay: tuple[int, int]) -> None:
    """Patch the fake driver in this process only: power delay and the extra resources,
    and the task monitor the stock UpdateService's answers name."""
    from sushy_tools import error
    from sushy_tools.emulator import main as emulator
    from sushy_tools.emulator.resources.systems import fakedriver

    fakedriver.random = _DelayRandom(*power_delay)
    if not getattr(fakedriver.FakeDriver, "_metalforge_lab", False):
        driver = _lab_driver(fakedriver.FakeDriver, error)
        driver._metalforge_lab = True
        fakedriver.FakeDriver = driver
    if "lab_task" not in emulator.app.view_functions:
        emulator.app.add_url_rule(
            "/redfish/v1/TaskService/Tasks/<task_id>", "lab_task", _finished_task
        )
    if "lab_volume_delete" not in emulator.app.view_functions:
        redfish_storage.install(emulator.app, error)
    if "lab_dell_service" not in emulator.app.view_functions:
        redfish_dell.install(emulator.app, error)
    if "lab_event_service" not in emulator.app.view_functions:
        redfish_events.install(emulator.app, error)


def _delay(value: str) -> tuple[int, int]:
    low, _, high = value.partition(",")
    try:
        pair = int(low), int(high or low)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI seconds, got {value!r}") from None
    if pair[0] < 0 or pair[1] < pair[0]:
        raise argparse.ArgumentTypeError(f"expected 0 <= LO <= HI, got {value!r}")
    return pair


def _exit(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m metalforge_lab.redfish_emulator", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--config", required=True, help="the emulator's Python config file")
    parser.add_argument(
        "--power-delay",
        type=_delay,
        default=(0, 0),
        help="seconds (LO,HI) before a power change shows; default 0,0",
    )
    args = parser.parse_args(argv)
    install(args.power_delay)
    from sushy_tools.emulator import main as emulator

    sys.argv = ["sushy-emulator", "--config", args.config]
    signal.signal(signal.SIGTERM, _exit)
    try:
        with contextlib.suppress(KeyboardInterrupt, SystemExit):
            emulator.main()
    finally:
        _MACHINES.stop_all()  # a machine must not outlive its BMC


if __name__ == "__main__":
    main()
