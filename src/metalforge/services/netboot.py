"""What a network-booting machine is served: the chain script, its own script, its images.

Nothing here needs credentials: machines on the provisioning network ask
before anything about them is known. So a script is only given to a node
that is booting the agent's ramdisk right now through the ``ipxe`` boot
interface (a flow that may boot the agent, and a ramdisk session a
conductor began), and an image only by the digest such a script names.
Every other request is a 404: a machine that is not being provisioned
boots from its disk.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from metalforge.conductor.flows import catalog
from metalforge.db import agent_sessions
from metalforge.db.models import Node
from metalforge.drivers.base import DriverError, ReadOnlyTask
from metalforge.drivers.hardware import UnknownDriver
from metalforge.drivers.ipxe import DEPLOY_IMAGES, IpxeBoot, deploy_sources, ramdisk_params
from metalforge.errors import not_found
from metalforge.netboot import ipxe
from metalforge.netboot.images import CachedImage, cache_for
from metalforge.services import lookup
from metalforge.services.context import Services

LOG = logging.getLogger(__name__)

FAILED_RETRY_DELAY = 30
"""Seconds a node waits before asking again after its images could not be fetched."""


@dataclass(frozen=True)
class Script:
    """An iPXE script, and whether it boots the ramdisk (else it asks again later)."""

    text: str
    boots: bool


def _no_script() -> Exception:
    return not_found("No boot script for this machine now.")


def chain_script(svc: Services) -> str:
    """The script DHCP hands iPXE clients (404 without ``netboot.http_url``)."""
    base = svc.settings.conductor.netboot.http_url
    if base is None:
        LOG.warning("a machine asked for boot.ipxe, but conductor.netboot.http_url is not set")
        raise _no_script()
    return ipxe.chain_script(base)


def _booting(svc: Services, mac: str) -> Node | None:
    """The node with this MAC, if it is booting the agent's ramdisk through ``ipxe`` now."""
    with svc.db.read() as session:
        node = lookup.node_by_macs(session, [mac])
        if node is None or node.provision_state not in catalog.LOOKUP_STATES:
            return None
        try:
            boot = svc.drivers.optional_interface_of(node, IpxeBoot)
        except UnknownDriver:  # its hardware type is not enabled on this host
            return None
        if boot is None:
            return None
        try:
            agent_sessions.check_booted(session, node.id)
        except agent_sessions.NoRamdiskBooted:
            return None
    return node


def node_script(svc: Services, raw_mac: str) -> Script:
    """The script of the machine asking with ``raw_mac`` (404 unless it boots the ramdisk).

    While this host has not fetched the node's images yet it starts fetching
    them and answers with a script that asks again shortly.
    """
    mac = ipxe.mac_from_path(raw_mac)
    if mac is None:
        raise _no_script()
    netboot = svc.settings.conductor.netboot
    node = _booting(svc, mac)
    if node is None or netboot.http_url is None:
        raise _no_script()
    task = ReadOnlyTask(node, svc.settings.conductor)
    try:
        sources = deploy_sources(task)
        params = ramdisk_params(task, mac)
    except DriverError as exc:
        LOG.warning("node %s boots with ipxe but cannot be served: %s", node.uuid, exc)
        raise _no_script() from None
    cache = cache_for(netboot)
    images: dict[str, CachedImage] = {}
    failures: list[str] = []
    for key, source in sources.items():
        found = cache.cached(source)
        if found is not None:
            images[key] = found
            continue
        failed = cache.prefetch(source, DEPLOY_IMAGES[key])
        if failed is not None:
            failures.append(f"driver_info.{key}: {failed}")
    if len(images) < len(sources):
        if failures:
            LOG.warning("node %s: %s", node.uuid, "; ".join(failures))
        delay = FAILED_RETRY_DELAY if failures else netboot.ipxe_retry_delay
        return Script(ipxe.wait_script(netboot.http_url, mac, delay), boots=False)
    flow = catalog.flow_of(node.provision_state)
    purpose = flow.name if flow is not None else node.provision_state
    boot = ipxe.RamdiskBoot(
        node_uuid=node.uuid,
        purpose=purpose,
        mac=mac,
        kernel_url=f"{netboot.http_url}/boot/images/{images['deploy_kernel'].digest}",
        ramdisk_url=f"{netboot.http_url}/boot/images/{images['deploy_ramdisk'].digest}",
        params=params,
    )
    return Script(ipxe.ramdisk_script(boot), boots=True)


def firmware(svc: Services, name: str) -> Path:
    """The iPXE binary UEFI HTTP boot firmware is told to fetch (404 for anything else, and
    unless this installation runs the DHCP service that tells it)."""
    dhcp = svc.settings.dhcp
    if not dhcp.enabled or name != dhcp.uefi_boot_file:
        raise not_found("No such boot firmware.")
    path = dhcp.tftp_root / name
    if not path.is_file():
        LOG.warning("UEFI HTTP boot asked for %s, which is not installed", path)
        raise not_found("No such boot firmware.")
    return path


def image(svc: Services, digest: str) -> CachedImage:
    """A cached deploy image by its SHA-256 (404 unless this host has it)."""
    cache = cache_for(svc.settings.conductor.netboot)
    found = cache.blob(digest)
    if found is None:
        raise not_found("No such boot image.")
    cache.used(found)  # a BMC or a node reads it: the least recent goes first
    return found
