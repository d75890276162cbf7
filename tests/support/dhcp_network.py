"""A provisioning network in network namespaces: a switch, DHCP servers, DHCP clients.

Everything lives in namespaces the test creates (named with the test
process's id), so the host's interfaces and firewall are never touched:
``<p>sw`` holds the bridge; each server and each client namespace has an
``eth0`` whose peer is on the bridge. Servers run the real dnsmasq (from
apt), clients ask with busybox's ``udhcpc`` through a script that only
prints the lease (the default script would rewrite the host's resolv.conf).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from metalforge_lab.namespaces import ip

IN_CI = bool(os.environ.get("CI"))
TOOLS = ("ip", "dnsmasq", "nft", "udhcpc")
_counter = itertools.count()

_PRINT_LEASE = """#!/bin/sh
[ "$1" = bound ] && echo "LEASE ip=$ip serverid=$serverid siaddr=$siaddr boot_file=$boot_file"
exit 0
"""


def require_namespaces() -> None:
    """Fail in CI, skip elsewhere, when these tests cannot run here."""
    reason = None
    if os.geteuid() != 0:
        reason = "network namespaces and firewalls need root"
    elif missing := [tool for tool in TOOLS if shutil.which(tool) is None]:
        reason = f"missing tools: {', '.join(missing)} (make system-packages)"
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"CI must run the PXE filter's namespace tests: {reason}")
    pytest.skip(reason)


@dataclass
class DhcpServer:
    namespace: str
    address: str
    hostsdir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def nft(self) -> list[str]:
        """``nft`` inside this server's namespace (the firewall drivers' ``nft_command``)."""
        return ["ip", "netns", "exec", self.namespace, "nft"]


@dataclass
class DhcpNetwork:
    """The switch, servers and clients; ``close`` removes them all."""

    workdir: Path
    prefix: str = field(default_factory=lambda: f"pf{os.getpid() % 100000}x{next(_counter)}")
    servers: list[DhcpServer] = field(default_factory=list)
    clients: dict[str, str] = field(default_factory=dict)
    """MAC → its namespace."""
    _namespaces: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._script = self.workdir / "print-lease.sh"
        self._script.write_text(_PRINT_LEASE)
        self._script.chmod(0o755)
        switch = self._namespace("sw")
        ip("-n", switch, "link", "add", "br0", "type", "bridge")
        ip("-n", switch, "link", "set", "br0", "up")

    def _namespace(self, suffix: str) -> str:
        name = f"{self.prefix}{suffix}"
        ip("netns", "add", name)
        self._namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")
        return name

    def _plug(self, namespace: str, mac: str | None = None) -> None:
        """``eth0`` in ``namespace``, its peer on the switch's bridge."""
        peer = f"p{len(self._namespaces)}"
        switch = self._namespaces[0]
        ip("link", "add", peer, "netns", switch, "type", "veth", "peer", "eth0", "netns", namespace)
        ip("-n", switch, "link", "set", peer, "master", "br0")
        ip("-n", switch, "link", "set", peer, "up")
        if mac is not None:
            ip("-n", namespace, "link", "set", "eth0", "address", mac)
        ip("-n", namespace, "link", "set", "eth0", "up")

    def add_server(self, number: int) -> DhcpServer:
        """A host at 10.250.0.<number> serving its own slice of the pool (none overlap)."""
        namespace = self._namespace(f"s{number}")
        self._plug(namespace)
        address = f"10.250.0.{number}"
        ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        hostsdir = self.workdir / f"hostsdir-{number}"
        hostsdir.mkdir()
        server = DhcpServer(namespace, address, hostsdir)
        self.servers.append(server)
        return server

    def start_dnsmasq(self, server: DhcpServer) -> None:
        number = int(server.address.rsplit(".", 1)[1])
        state = self.workdir / f"dnsmasq-{number}"
        state.mkdir(exist_ok=True)
        first = 100 + 20 * (number - 1)
        server.process = subprocess.Popen(
            [
                "ip", "netns", "exec", server.namespace,
                "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--port=0",
                "--interface=eth0", "--bind-interfaces", "--except-interface=lo",
                f"--dhcp-range=10.250.0.{first},10.250.0.{first + 19},10m",
                f"--dhcp-hostsdir={server.hostsdir}",
                f"--dhcp-leasefile={state / 'leases'}",
                f"--pid-file={state / 'pid'}",
                "--no-ping", "--log-dhcp", f"--log-facility={state / 'log'}",
                # The test's directories are root's alone; dnsmasq would drop to nobody.
                "--user=root", "--group=root",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop_dnsmasq(self, server: DhcpServer) -> None:
        if server.process is not None and server.process.poll() is None:
            server.process.kill()
            server.process.wait(10)

    def add_client(self, number: int, mac: str) -> None:
        namespace = self._namespace(f"c{number}")
        self._plug(namespace, mac)
        self.clients[mac] = namespace

    def lease(self, mac: str, *, attempts: int = 1) -> str | None:
        """The server id of the lease the client got, or None when nobody answered.

        A refused client costs ``attempts`` seconds (one discover per second).
        """
        got = self.offer(mac, attempts=attempts)
        return None if got is None else got["serverid"]

    def offer(
        self,
        mac: str,
        *,
        attempts: int = 1,
        options: tuple[str, ...] = (),
        vendor_class: str | None = None,
    ) -> dict[str, str] | None:
        """What the lease said (``ip``, ``serverid``, ``siaddr``, ``boot_file``), or None.

        ``options`` go into the request as udhcpc's ``-x`` does (``0x5d:0007``
        asks as x86-64 UEFI firmware, ``0xaf:01`` as iPXE); ``vendor_class`` is option 60.
        """
        sent = [arg for option in options for arg in ("-x", option)]
        if vendor_class is not None:
            sent += ["-V", vendor_class]
        done = subprocess.run(
            [
                "ip", "netns", "exec", self.clients[mac],
                "udhcpc", "-f", "-n", "-q", "-t", str(attempts), "-T", "1",
                "-i", "eth0", "-s", str(self._script), *sent,
            ],
            capture_output=True, text=True, timeout=30 + 3 * attempts,
        )  # fmt: skip
        for line in done.stdout.splitlines():
            if line.startswith("LEASE "):
                return dict(part.split("=", 1) for part in line.split()[1:])
        return None

    def run_in(self, mac: str, *command: str) -> subprocess.CompletedProcess[bytes]:
        """``command`` in the client's namespace (after it took a lease: it has no address)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.clients[mac], *command],
            capture_output=True,
            timeout=60,
            check=False,
        )

    def close(self) -> None:
        for server in self.servers:
            self.stop_dnsmasq(server)
        for namespace in reversed(self._namespaces):
            for pid in ip("netns", "pids", namespace, check=False).split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("netns", "del", namespace, check=False)
