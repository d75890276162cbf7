"""Redfish test peers: sushy-emulator subprocesses, an image server, a stack with ``redfish``.

Test modules wrap the generators here in fixtures of the scope they need
(an emulator starts in under a second; a module shares one and hands each
test its own fake system).
"""

from __future__ import annotations

import functools
import http.server
import itertools
import json
import threading
import urllib.request
from base64 import b64encode
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from metalforge.config import Settings, load_settings
from metalforge.drivers.redfish.connection import CONNECTIONS
from metalforge_lab.ports import free_port
from metalforge_lab.redfish_emulator import EmulatorProcess, FakeSystem
from tests.support.stack import FAST_CONDUCTOR, Stack, start_stack

USER = "admin"
PASSWORD = "s3cret-bmc"
_serial = itertools.count(1)


def fake_system(*, disks_gib: tuple[int, ...] = (), power_state: str = "Off") -> FakeSystem:
    """A fake system with a unique UUID and MAC."""
    n = next(_serial)
    return FakeSystem(
        uuid=f"52f0e6a4-0000-4000-8000-{n:012d}",
        name=f"redfish-{n}",
        power_state=power_state,
        macs=[f"52:54:00:00:{n // 256:02x}:{n % 256:02x}"],
        disks_gib=disks_gib,
    )


class Bmc:
    """One emulator and its systems, handed out one per test so tests share no state."""

    def __init__(self, emulator: EmulatorProcess, users: dict[str, str] | None) -> None:
        self.emulator = emulator
        self.users = users
        self._unused = list(emulator.systems)
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return self.emulator.address

    def take(self, where: Callable[[FakeSystem], bool] = lambda _system: True) -> FakeSystem:
        """An unused system (the first ``where`` accepts)."""
        with self._lock:
            for index, system in enumerate(self._unused):
                if where(system):
                    return self._unused.pop(index)
            raise RuntimeError("every fake system of this emulator is in use; start more")

    def driver_info(self, system: FakeSystem, **extra: Any) -> dict[str, Any]:
        info: dict[str, Any] = {
            "redfish_address": self.address,
            "redfish_system_id": self.emulator.system_path(system.uuid),
        }
        if self.users:
            user, password = next(iter(self.users.items()))
            info.update(redfish_username=user, redfish_password=password)
        return {**info, **extra}

    def get(self, path: str) -> dict[str, Any]:
        """A raw GET on the emulator (with the BMC's credentials), bypassing sushy."""
        with urllib.request.urlopen(self._request(path), timeout=10) as answer:
            body: dict[str, Any] = json.loads(answer.read())
        return body

    def post(self, path: str, body: dict[str, Any]) -> None:
        """A raw POST on the emulator: what another tool, not metalforge, does to the BMC."""
        request = self._request(path, json.dumps(body).encode())
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()

    def _request(self, path: str, data: bytes | None = None) -> urllib.request.Request:
        request = urllib.request.Request(f"{self.address}{path}", data=data)
        if self.users:
            user, password = next(iter(self.users.items()))
            token = b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        return request

    def system(self, system: FakeSystem, sub: str = "") -> dict[str, Any]:
        return self.get(self.emulator.system_path(system.uuid) + sub)


def start_bmc(
    workdir: Path,
    count: int = 8,
    *,
    users: dict[str, str] | None = None,
    power_delay: tuple[int, int] = (0, 0),
    systems: list[FakeSystem] | None = None,
    notification_url: str | None = None,
    event_service: bool = False,
) -> Iterator[Bmc]:
    """An emulator with ``count`` fresh fake systems; stopped (and clients forgotten) after."""
    chosen = systems or [fake_system(disks_gib=(100,) if i % 2 else ()) for i in range(count)]
    emulator = EmulatorProcess(
        workdir,
        free_port(),
        chosen,
        users=users,
        power_delay=power_delay,
        notification_url=notification_url,
        event_service=event_service,
    )
    emulator.start()
    try:
        yield Bmc(emulator, users)
    finally:
        emulator.stop()
        CONNECTIONS.clear()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


def serve_directory(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (the emulator downloads images); yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def start_redfish_stack(settings: Settings) -> Stack:
    """``start_stack`` with the ``redfish`` hardware type enabled beside ``fake-hardware``."""
    conductor = settings.conductor.model_copy(
        update={"enabled_hardware_types": ["fake-hardware", "redfish"]}
    )
    return start_stack(settings.model_copy(update={"conductor": conductor}))


def running_stack(db_url: str, *hardware_types: str) -> Iterator[Stack]:
    """A stack on ``db_url`` whose conductor drives ``hardware_types`` (default: the
    ``redfish`` type beside ``fake-hardware``), stopped after; for fixtures."""
    settings = load_settings(
        database={"url": db_url},
        conductor={
            **FAST_CONDUCTOR,
            "hostname": "test-conductor",
            "enabled_hardware_types": list(hardware_types or ("fake-hardware", "redfish")),
        },
    )
    running = start_stack(settings)
    try:
        yield running
    finally:
        running.stop()
