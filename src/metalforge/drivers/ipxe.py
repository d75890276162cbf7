"""``ipxe``: boot the agent's ramdisk through iPXE scripts metalforge serves.

The node network-boots once (``http-ipxe``: through UEFI HTTP boot); its
iPXE (chainloaded by the provisioning network's DHCP, or built into its
firmware) asks metalforge for its script, which loads the deploy kernel and
ramdisk of ``driver_info.deploy_kernel`` and ``deploy_ramdisk`` from
metalforge with the kernel parameters the agent needs (``netboot.ipxe``,
``services.netboot``) and the operator's own (the node's
``kernel_append_params``, else ``netboot.kernel_append``). The instance
boots from its disk; a node that is not booting the ramdisk gets no script.

Preparing the boot fetches both images into this host's cache first, so a
missing or wrong image fails the flow at once, with the reason, instead of
the node timing out later.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from metalforge import states
from metalforge.config import SAFE_KERNEL_PARAM
from metalforge.drivers.base import BootInterface, DriverError, DriverTask
from metalforge.drivers.network_boot import boot_from_disk, boot_from_network
from metalforge.netboot.images import (
    CachedImage,
    ImageError,
    ImageKind,
    cache_for,
    check_source,
)
from metalforge.netboot.ipxe import agent_params

DEPLOY_IMAGES = {"deploy_kernel": ImageKind.KERNEL, "deploy_ramdisk": ImageKind.RAMDISK}
"""The ``driver_info`` keys of the agent's boot images, and what each must be."""


def deploy_sources(task: DriverTask) -> dict[str, str]:
    """``driver_info``'s deploy kernel and ramdisk sources, checked for form (``DriverError``)."""
    info = task.node.driver_info
    missing = [key for key in DEPLOY_IMAGES if not info.get(key)]
    if missing:
        raise DriverError(
            f"Cannot boot the ramdisk: driver_info is missing {', '.join(missing)} "
            "(an http(s) URL or an absolute file path each)"
        )
    sources: dict[str, str] = {}
    for key in DEPLOY_IMAGES:
        value = info[key]
        if not isinstance(value, str):
            raise DriverError(f"driver_info.{key} must be a string, not {type(value).__name__}")
        sources[key] = value
    return sources


KERNEL_APPEND = "kernel_append_params"
"""The node's own kernel parameters for the ramdisk, in ``instance_info`` or
``driver_info`` (Ironic's key); ``%default%`` in it stands for
``netboot.kernel_append``."""
_MAX_APPEND = 2000


def kernel_append(task: DriverTask) -> list[str]:
    """The operator's kernel parameters for this node's ramdisk: ``instance_info``'s
    ``kernel_append_params``, else ``driver_info``'s, else ``netboot.kernel_append``.

    A node's value goes into an iPXE script and onto a boot ISO's command line,
    so it is refused (``DriverError``) unless every parameter is plain text.
    """
    default = task.settings.netboot.kernel_append
    node = task.node
    for field, found in (
        ("instance_info", node.instance_info),
        ("driver_info", node.driver_info),
    ):
        value: Any = (found or {}).get(KERNEL_APPEND)
        if value is None:
            continue
        check_kernel_append(field, value)
        return value.replace("%default%", default).split()  # type: ignore[no-any-return]
    return default.split()


def check_kernel_append(field: str, value: Any) -> None:
    """Refuse (``DriverError``) a node's ``kernel_append_params`` that is not plain kernel
    parameters: it goes into an iPXE script and onto a boot ISO's command line, where a
    newline or a directive would be obeyed. Checked when it is set, and again at boot."""
    if not isinstance(value, str) or len(value) > _MAX_APPEND:
        raise DriverError(
            f"{field}.{KERNEL_APPEND} must be a string of at most {_MAX_APPEND} characters"
        )
    if any(c in value for c in "\r\n\0"):
        raise DriverError(f"{field}.{KERNEL_APPEND} must be one line")
    params = value.replace("%default%", "").split()
    unsafe = [param for param in params if not SAFE_KERNEL_PARAM.match(param)]
    if unsafe:
        raise DriverError(
            f"{field}.{KERNEL_APPEND}: kernel parameter {unsafe[0]!r} has characters "
            "a boot script would interpret"
        )


def ramdisk_params(task: DriverTask, mac: str | None) -> tuple[str, ...]:
    """Every kernel parameter of this node's agent ramdisk, booted from ``mac`` (``None``
    for virtual media), with ``netboot.http_url`` as the agent's API.

    A network boot also names the request that started the flow
    (``ipa-global-request-id``), which the agent logs with; a boot ISO does not,
    since it is built once for every flow that boots the same images.
    """
    api_url = task.settings.netboot.http_url
    if api_url is None:
        raise DriverError("conductor.netboot.http_url is unset: the agent would not find us")
    append = kernel_append(task)
    request_id = task.node.flow_request_id
    if mac is not None and request_id:
        param = f"ipa-global-request-id={request_id}"
        if SAFE_KERNEL_PARAM.match(param):
            append = [param, *append]
    return agent_params(
        api_url=api_url,
        mac=mac,
        inspect=task.node.provision_state in (states.INSPECTING, states.INSPECT_WAIT),
        append=append,
    )


def check_deploy_images(task: DriverTask) -> None:
    """Refuse, without fetching, deploy images that can never be had (``DriverError``)."""
    allowed = tuple(task.settings.netboot.image_dirs)
    for key, source in deploy_sources(task).items():
        try:
            check_source(source, allowed)
        except ImageError as exc:
            raise DriverError(f"driver_info.{key}: {exc}") from None


def fetch_deploy_images(task: DriverTask) -> dict[str, CachedImage]:
    """The deploy kernel and ramdisk in this host's cache, fetched unless they were."""
    cache = cache_for(task.settings.netboot)
    images: dict[str, CachedImage] = {}
    for key, source in deploy_sources(task).items():
        try:
            images[key] = cache.fetch(source, DEPLOY_IMAGES[key])
        except ImageError as exc:
            raise DriverError(f"driver_info.{key}: {exc}") from None
    return images


RAMDISK_PIN = "ramdisk"
"""What a node's pin on its deploy images is for: the image cache keeps them while the
node's ramdisk boots from them (``ImageCache.pin``)."""


def release_ramdisk_images(task: DriverTask) -> None:
    """The node's ramdisk no longer needs its images: the cache may evict them."""
    with contextlib.suppress(ImageError):  # no cache configured: nothing was pinned
        cache_for(task.settings.netboot).unpin(task.node.uuid, RAMDISK_PIN)


class IpxeBoot(BootInterface):
    """The ramdisk boots from iPXE scripts metalforge serves; the instance from disk."""

    name = "ipxe"
    http_boot: ClassVar[bool] = False
    """Ask the BMC for UEFI HTTP boot (which loads iPXE over HTTP) rather than PXE."""

    def properties(self) -> dict[str, str]:
        return {
            "deploy_kernel": "The agent's kernel: an http(s) URL or a file path. Required.",
            "deploy_ramdisk": "The agent's initramfs: an http(s) URL or a file path. Required.",
        }

    def validate(self, task: DriverTask) -> None:
        check_deploy_images(task)
        kernel_append(task)

    def prepare_ramdisk(self, task: DriverTask) -> None:
        ramdisk_params(task, mac=None)  # refuses bad parameters now, not at the node's boot
        images = fetch_deploy_images(task)
        cache_for(task.settings.netboot).pin(task.node.uuid, RAMDISK_PIN, images.values())
        boot_from_network(task, http=self.http_boot)

    def prepare_instance(self, task: DriverTask) -> None:
        boot_from_disk(task)
        release_ramdisk_images(task)

    def clean_up_instance(self, task: DriverTask) -> None:
        release_ramdisk_images(task)


class IpxeHttpBoot(IpxeBoot):
    """``ipxe`` whose first stage is the firmware's UEFI HTTP boot (Ironic's
    ``http-ipxe``): metalforge's DHCP answers HTTP boot clients with the iPXE
    binary's URL, and the scripts are the same."""

    name = "http-ipxe"
    http_boot = True
