"""A simulated IPMI BMC on pyghmi's server side, for driving the ``ipmi`` hardware type in tests.

One process serves ``--count`` BMCs on consecutive UDP ports (pyghmi
multiplexes every server socket in one select loop). Each BMC has:

* a chassis power state that changes after ``--power-delay`` seconds, as a
  real server takes a moment to come up or shut its OS down;
* the system boot options as raw parameter bytes, so whatever a client sets
  (pyghmi, ``ipmitool chassis bootdev``, Ironic-style ``raw 0x00 0x08 0x05``)
  reads back byte for byte with ``ipmitool chassis bootparam get 5``; a
  one-time boot override is cleared when the system boots, as firmware does;
* a GUID derived from its address and port, so tests can predict it.

pyghmi's server always answers an RMCP+ open-session request with cipher
suite 3 (SHA-1) whatever the client proposed, and pyghmi's own client, which
proposes SHA-256 first, then fails in the RAKP exchange. Here a proposal the
server cannot honour is refused with RMCP+ status 0x11 (no matching cipher
suite), as a real SHA-1-only BMC does, and the client falls back to SHA-1.

The pyghmi server and any pyghmi client must live in different processes:
pyghmi keeps its sessions in class-level state shared by both sides. Run it
as ``python -m metalforge_lab.ipmi_bmc``; ``BmcProcess`` does so for tests.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import pyghmi.ipmi.bmc as pyghmi_bmc
import pyghmi.ipmi.private.serversession as serversession
import pyghmi.ipmi.private.session as pyghmi_session

from metalforge_lab.running import StartStop

_SHA1 = 1
"""RAKP-HMAC-SHA1 (authentication) and HMAC-SHA1-96 (integrity): cipher suite 3."""
_NO_MATCHING_CIPHER_SUITE = 0x11
_NOT_IN_PRESENT_STATE = 0xD5
_PARAMETER_NOT_SUPPORTED = 0x80
_BOOT_FLAGS = 5
_BOOT_FLAGS_VALID = 0x80
_BOOT_FLAGS_PERSISTENT = 0x40
_DEFAULT_PARAMETERS: dict[int, bytes] = {
    0: bytes([0]),  # set in progress
    3: bytes([0]),  # boot info acknowledge
    4: bytes([0, 0]),  # boot flag valid bit clearing
    _BOOT_FLAGS: bytes(5),
}
_READY = "READY"
"""Printed on stdout once every socket is bound, so a parent process knows when to start."""


class _Sha1OnlySession(serversession.ServerSession):  # type: ignore[misc]
    """A server session that refuses algorithms it would not really use."""

    def create_open_session_response(self, request: bytearray) -> bytearray:
        auth, integrity = request[12], request[20]
        if auth != _SHA1 or integrity != _SHA1:
            # Bytes 4-7 echo the client's session id; nothing else is needed to refuse.
            return bytearray([request[0], _NO_MATCHING_CIPHER_SUITE, 0, 0]) + request[4:8]
        response: bytearray = super().create_open_session_response(request)
        return response


class SimulatedBmc(pyghmi_bmc.Bmc):  # type: ignore[misc]
    """One BMC: power, boot options and GUID, behind pyghmi's RMCP+ server."""

    def __init__(
        self,
        *,
        address: str,
        port: int,
        user: str,
        password: str,
        power_delay: float = 0.0,
        power_on: bool = False,
    ) -> None:
        guid = uuid.uuid5(uuid.NAMESPACE_URL, f"ipmi://{address}:{port}")
        super().__init__({user: password}, port=port, bmcuuid=guid, address=address)
        self.guid = guid
        self.power_delay = power_delay
        self._powered = power_on
        self._pending: tuple[bool, float] | None = None
        self._parameters = dict(_DEFAULT_PARAMETERS)
        self._lock = threading.Lock()

    # -- sessions ----------------------------------------------------------
    def sessionless_data(self, data: bytes, sockaddr: Any) -> None:
        raw = bytearray(data)
        opens_session = (
            len(raw) >= 22 and raw[0] == 6 and raw[2:4] == b"\xff\x07" and raw[4:6] == b"\x06\x10"
        )
        if opens_session:
            _Sha1OnlySession(
                self.authdata, self.kg, sockaddr, self.serversocket, raw[16:], self.uuid, bmc=self
            )
            return
        super().sessionless_data(data, sockaddr)

    # -- power -------------------------------------------------------------
    def _settle(self) -> None:
        if self._pending is not None and time.monotonic() >= self._pending[1]:
            self._powered = self._pending[0]
            self._pending = None

    def _schedule(self, powered: bool) -> None:
        if powered and not self._powered:
            self._booted()
        if self.power_delay <= 0:
            self._powered, self._pending = powered, None
        else:
            self._pending = (powered, time.monotonic() + self.power_delay)

    def _booted(self) -> None:
        """Firmware consumes a one-time boot override when the system boots."""
        flags = bytearray(self._parameters[_BOOT_FLAGS])
        if not flags[0] & _BOOT_FLAGS_PERSISTENT:
            flags[0] &= ~_BOOT_FLAGS_VALID & 0xFF
            self._parameters[_BOOT_FLAGS] = bytes(flags)

    def get_power_state(self) -> str:
        with self._lock:
            self._settle()
            return "on" if self._powered else "off"

    def power_on(self) -> int:
        with self._lock:
            self._settle()
            self._schedule(True)
        return 0

    def power_off(self) -> int:
        with self._lock:
            self._settle()
            self._schedule(False)
        return 0

    def power_shutdown(self) -> int:
        return self.power_off()

    def _restart(self) -> int:
        with self._lock:
            self._settle()
            if not self._powered:
                return _NOT_IN_PRESENT_STATE
            self._booted()
        return 0

    def power_reset(self) -> int:
        return self._restart()

    def power_cycle(self) -> int:
        return self._restart()

    def pulse_diag(self) -> int:
        """An NMI (chassis control 4): taken while powered on, refused while off."""
        with self._lock:
            self._settle()
            return 0 if self._powered else _NOT_IN_PRESENT_STATE

    def get_system_guid(self) -> uuid.UUID:
        return self.guid

    def cold_reset(self) -> int:
        return 0

    # -- boot options --------------------------------------------------------
    def get_system_boot_options(self, request: dict[str, Any], session: Any) -> None:
        selector = request["data"][0] & 0x7F
        with self._lock:
            value = self._parameters.get(selector)
        if value is None:
            session.send_ipmi_response(code=_PARAMETER_NOT_SUPPORTED)
            return
        session.send_ipmi_response(data=[1, selector, *value])

    def set_system_boot_options(self, request: dict[str, Any], session: Any) -> None:
        selector, value = request["data"][0] & 0x7F, bytes(request["data"][1:])
        with self._lock:
            known = self._parameters.get(selector)
            if known is None or len(value) != len(known):
                session.send_ipmi_response(code=_PARAMETER_NOT_SUPPORTED)
                return
            self._parameters[selector] = value
        session.send_ipmi_response()

    def boot_flags(self) -> bytes:
        """The five bytes of boot options parameter 5, as a client would read them."""
        with self._lock:
            return self._parameters[_BOOT_FLAGS]


def serve(
    address: str,
    ports: Sequence[int],
    user: str,
    password: str,
    *,
    power_delay: float = 0.0,
    power_on: bool = False,
) -> list[SimulatedBmc]:
    """Bind one BMC per port; the caller runs ``SimulatedBmc.listen`` to answer them."""
    return [
        SimulatedBmc(
            address=address,
            port=port,
            user=user,
            password=password,
            power_delay=power_delay,
            power_on=power_on,
        )
        for port in ports
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--address", default="127.0.0.1", help="address to bind (default loopback)")
    parser.add_argument("--port", type=int, default=6230, help="UDP port of the first BMC")
    parser.add_argument("--count", type=int, default=1, help="BMCs on consecutive ports")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", default="password")
    parser.add_argument(
        "--power-delay", type=float, default=0.0, help="seconds a power change takes to happen"
    )
    parser.add_argument("--power-on", action="store_true", help="start powered on")
    args = parser.parse_args(argv)
    ports = range(args.port, args.port + args.count)
    serve(
        args.address,
        ports,
        args.user,
        args.password,
        power_delay=args.power_delay,
        power_on=args.power_on,
    )
    print(f"{_READY} {args.address} {args.port}-{ports[-1]}", flush=True)
    while True:
        pyghmi_session.Session.wait_for_rsp(30)


class BmcProcess(StartStop):
    """The simulator in a child process, started and stopped by PID (tests use it).

    ``with BmcProcess(port=..., count=3) as bmcs:`` waits until every socket is
    bound; leaving the block terminates the child. Its output goes to
    ``log_path`` (or is discarded), since it is the only trace of what it did.
    """

    def __init__(
        self,
        *,
        port: int,
        count: int = 1,
        address: str = "127.0.0.1",
        user: str = "admin",
        password: str = "password",
        power_delay: float = 0.0,
        power_on: bool = False,
        log_path: Path | None = None,
        startup_timeout: float = 15.0,
    ) -> None:
        self.address = address
        self.ports = list(range(port, port + count))
        self.user = user
        self.password = password
        self._argv = [
            sys.executable,
            "-m",
            "metalforge_lab.ipmi_bmc",
            f"--address={address}",
            f"--port={port}",
            f"--count={count}",
            f"--user={user}",
            f"--password={password}",
            f"--power-delay={power_delay}",
            *(["--power-on"] if power_on else []),
        ]
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        with contextlib.ExitStack() as stack:
            log: IO[str] | int = subprocess.DEVNULL
            if self.log_path is not None:
                log = stack.enter_context(self.log_path.open("w"))
            self.process = subprocess.Popen(
                self._argv, stdout=subprocess.PIPE, stderr=log, text=True
            )
        stdout = self.process.stdout
        assert stdout is not None
        ready = threading.Event()
        first_line: list[str] = []

        def read_first_line() -> None:
            first_line.append(stdout.readline())
            ready.set()

        threading.Thread(target=read_first_line, daemon=True).start()
        if not ready.wait(self.startup_timeout) or not first_line[0].startswith(_READY):
            self.stop()
            raise RuntimeError(f"IPMI simulator did not start on ports {self.ports}")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(5)
        if process.stdout is not None:
            process.stdout.close()


if __name__ == "__main__":
    main()
