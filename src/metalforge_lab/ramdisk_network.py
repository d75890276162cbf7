"""Static network settings for the agent ramdisk, from a node's ``network_data.json``.

On a provisioning network without DHCP, a node booted from virtual media
learns its address from the ISO: metalforge writes the node's
``network_data`` (the layout OpenStack's metadata service uses:
``links``, ``networks``, ``services``) to ``openstack/latest/network_data.json``
on an ISO labelled ``config-2``, as Ironic does. The ramdisk's ``/init``
finds that volume and runs this module with the file; it brings the links
up, adds the addresses, routes and name servers, and asks DHCP only on the
networks that say so (``ipv4_dhcp``, ``ipv6_dhcp``).

It runs inside the ramdisk (``python3 network_data.py FILE``), so it uses
the standard library only; ``plan`` is the pure part, tested on its own.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PHYSICAL = frozenset({"phy", "ethernet", "bridge", "ovs", "tap", "vif", "hw_veb", "vhostuser"})
"""Link types that name a NIC by its MAC; ``vlan`` and ``bond`` are built on top of those."""


class NetworkDataError(ValueError):
    """The file does not describe a network this ramdisk can configure; the message says why."""


@dataclass
class Plan:
    """What to run: ``ip`` commands in order, interfaces to ask DHCP on, name servers."""

    commands: list[list[str]] = field(default_factory=list)
    dhcp: list[str] = field(default_factory=list)
    dns: list[str] = field(default_factory=list)


def _interface_names(links: list[dict[str, Any]], nics: dict[str, str]) -> dict[str, str]:
    """Link id -> interface name: physical links by MAC, VLANs as ``<parent>.<id>``."""
    names: dict[str, str] = {}
    for link in links:
        if link.get("type", "phy") in PHYSICAL:
            mac = str(link.get("ethernet_mac_address", "")).lower()
            if mac not in nics:
                raise NetworkDataError(f"link {link.get('id')!r}: no interface has MAC {mac!r}")
            names[str(link["id"])] = nics[mac]
    for link in links:
        if link.get("type") == "vlan":
            parent = names.get(str(link.get("vlan_link")))
            if parent is None:
                raise NetworkDataError(f"VLAN {link.get('id')!r}: unknown vlan_link")
            names[str(link["id"])] = f"{parent}.{int(link['vlan_id'])}"
        elif link.get("type") == "bond":
            raise NetworkDataError(f"link {link.get('id')!r}: bonds are not configured here")
    return names


def _prefix(netmask: object) -> int:
    """A netmask as a prefix length: ``24``, ``"24"``, ``"255.255.255.0"`` or
    ``"ffff:ffff:ffff:ffff::"`` (IPv6 masks, which ``ipaddress`` does not take)."""
    text = str(netmask)
    if text.isdigit():
        return int(text)
    mask = int(ipaddress.ip_address(text))
    width = 32 if "." in text else 128
    length = bin(mask).count("1")
    if mask != ((1 << length) - 1) << (width - length):
        raise NetworkDataError(f"netmask {text!r} is not contiguous")
    return length


def plan(data: dict[str, Any], nics: dict[str, str]) -> Plan:
    """The commands that apply ``data`` on a machine whose interfaces are ``nics``
    (MAC, lower case -> name)."""
    if not isinstance(data, dict) or not isinstance(data.get("links"), list):
        raise NetworkDataError("network_data has no list of links")
    links = data["links"]
    names = _interface_names(links, nics)
    result = Plan()
    for link in links:
        name = names[str(link["id"])]
        if link.get("type") == "vlan":
            parent = names[str(link["vlan_link"])]
            result.commands.append(
                ["ip", "link", "add", "link", parent, "name", name, "type", "vlan",
                 "id", str(int(link["vlan_id"]))]
            )  # fmt: skip
        if link.get("mtu"):
            result.commands.append(["ip", "link", "set", name, "mtu", str(int(link["mtu"]))])
        result.commands.append(["ip", "link", "set", name, "up"])
    for network in data.get("networks", []):
        if str(network.get("link")) not in names:
            raise NetworkDataError(f"network {network.get('id')!r}: unknown link")
        name = names[str(network.get("link"))]
        kind = network.get("type", "")
        if kind in ("ipv4_dhcp", "ipv6_dhcp"):
            result.dhcp.append(name)
            continue
        if kind not in ("ipv4", "ipv6"):
            raise NetworkDataError(f"network {network.get('id')!r}: unknown type {kind!r}")
        address = ipaddress.ip_interface(f"{network['ip_address']}/{_prefix(network['netmask'])}")
        result.commands.append(["ip", "addr", "add", str(address), "dev", name])
        for route in network.get("routes", []):
            destination = ipaddress.ip_network(f"{route['network']}/{_prefix(route['netmask'])}")
            gateway = str(ipaddress.ip_address(route["gateway"]))
            result.commands.append(
                ["ip", "route", "add", str(destination), "via", gateway, "dev", name]
            )
    for service in data.get("services", []):
        if service.get("type") == "dns":
            result.dns.append(str(ipaddress.ip_address(service["address"])))
    return result


def _nics() -> dict[str, str]:
    found = {}
    for device in sorted(Path("/sys/class/net").iterdir()):
        if (device / "device").exists():
            found[(device / "address").read_text().strip().lower()] = device.name
    return found


def main(argv: list[str]) -> int:
    """Apply the file; status 0 when the machine has a configured address or DHCP to try."""
    try:
        data = json.loads(Path(argv[1]).read_text())
        steps = plan(data, _nics())
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"network_data.json not applied: {error}", file=sys.stderr)
        return 1
    for command in steps.commands:
        done = subprocess.run(command, check=False)
        if done.returncode:
            print(f"network_data.json: {' '.join(command)} failed", file=sys.stderr)
            return 1
    if steps.dns:
        Path("/etc/resolv.conf").write_text("".join(f"nameserver {a}\n" for a in steps.dns))
    if steps.dhcp:
        os.execvp("dhclient", ["dhclient", "-1", *steps.dhcp])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
