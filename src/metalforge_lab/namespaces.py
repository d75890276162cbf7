"""The lab's provisioning network: a host bridge and one network namespace per virtual node.

The bridge holds the network's first address, where metalforge's agents'
endpoint listens; each virtual node gets a namespace whose ``eth0`` (one end
of a veth whose other end is on the bridge) carries the node's port MAC and
an address of its own, so the agent's lookup by MAC and its callback URL are
what a real machine would send. Names and the subnet are parameters, so two
labs (two test runs) can live on one host side by side.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
from dataclasses import dataclass

_IFNAMSIZ = 15
"""Longest Linux interface name."""


class NetworkError(RuntimeError):
    """An ``ip`` command failed."""


def ip(*args: str, check: bool = True) -> str:
    """Run one ``ip`` command; its stderr becomes the error's message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _check_name(name: str) -> str:
    if not name or len(name) > _IFNAMSIZ or "/" in name or " " in name:
        raise ValueError(f"{name!r} is not a usable interface name (1-{_IFNAMSIZ} chars)")
    return name


@dataclass(frozen=True)
class Bridge:
    """The host side of the provisioning network."""

    name: str
    network: ipaddress.IPv4Network

    @property
    def address(self) -> str:
        """The host's address on the network (the network's first one)."""
        return str(self.network.network_address + 1)

    def create(self) -> None:
        """Create the bridge; refuse if the name or the subnet is already taken on this host."""
        _check_name(self.name)
        if exists(self.name):
            raise NetworkError(f"interface {self.name} already exists")
        for line in ip("-o", "-4", "addr", "show").splitlines():
            fields = line.split()
            in_use = ipaddress.IPv4Interface(fields[3]).network
            if in_use.overlaps(self.network):
                raise NetworkError(f"{self.network} overlaps {in_use} on {fields[1]}")
        ip("link", "add", self.name, "type", "bridge")
        try:
            ip("addr", "add", f"{self.address}/{self.network.prefixlen}", "dev", self.name)
            ip("link", "set", self.name, "up")
        except NetworkError:
            self.delete()
            raise

    def delete(self) -> None:
        if exists(self.name):
            ip("link", "del", self.name)


@dataclass(frozen=True)
class NodeNetwork:
    """One virtual node's namespace and its veth into the bridge."""

    namespace: str
    host_veth: str
    mac: str
    address: str
    prefixlen: int

    def create(self, bridge: Bridge) -> None:
        _check_name(self.host_veth)
        ip("netns", "add", self.namespace)
        try:
            ip("-n", self.namespace, "link", "set", "lo", "up")
            ip(
                "link", "add", self.host_veth, "type", "veth",
                "peer", "name", "eth0", "netns", self.namespace,
            )  # fmt: skip
            ip("-n", self.namespace, "link", "set", "eth0", "address", self.mac)
            ip(
                "-n",
                self.namespace,
                "addr",
                "add",
                f"{self.address}/{self.prefixlen}",
                "dev",
                "eth0",
            )
            ip("-n", self.namespace, "link", "set", "eth0", "up")
            ip("link", "set", self.host_veth, "master", bridge.name)
            ip("link", "set", self.host_veth, "up")
        except NetworkError:
            self.delete()
            raise

    def processes(self) -> list[int]:
        """PIDs of the processes inside the namespace (an agent and its helpers)."""
        if self.namespace not in namespaces():
            return []
        return [int(pid) for pid in ip("netns", "pids", self.namespace).split()]

    def delete(self) -> None:
        """SIGKILL whatever still runs inside, then delete the namespace and its veth pair.

        ``ip netns del`` only unmounts the name: a namespace with processes
        in it would live on, unnamed and out of reach.
        """
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.namespace in namespaces():
            ip("netns", "del", self.namespace)
        # The veth usually goes with the namespace, a moment later: either outcome is fine.
        if exists(self.host_veth):
            ip("link", "del", self.host_veth, check=False)
            if exists(self.host_veth):
                raise NetworkError(f"could not delete {self.host_veth}")


def exists(interface: str) -> bool:
    """Whether a host interface of that name exists."""
    return subprocess.run(["ip", "link", "show", interface], capture_output=True).returncode == 0


def namespaces() -> set[str]:
    """Names of the host's network namespaces."""
    return {line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()}


def free_subnet(pool: str = "10.251.0.0/16", prefixlen: int = 24, seed: int = 0) -> str:
    """A subnet of ``pool`` that no host interface's address falls in.

    Concurrent labs (parallel test runs) each take one; ``seed`` (a PID, say)
    spreads their first guesses apart. The subnet is only free when asked:
    ``Bridge.create`` checks again.
    """
    used = [
        ipaddress.IPv4Interface(line.split()[3]).network
        for line in ip("-o", "-4", "addr", "show").splitlines()
    ]
    candidates = list(ipaddress.IPv4Network(pool).subnets(new_prefix=prefixlen))[1:]
    for offset in range(len(candidates)):
        candidate = candidates[(seed + offset) % len(candidates)]
        if not any(candidate.overlaps(network) for network in used):
            return str(candidate)
    raise NetworkError(f"no free /{prefixlen} left in {pool}")
