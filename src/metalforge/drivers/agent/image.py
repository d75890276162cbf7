"""What the agent needs to write an image: ``image_info`` built from ``instance_info``.

The agent downloads the image itself and verifies its checksum while
writing; metalforge only passes the URL and the expected hash. A raw image
is streamed onto the disk without a temporary copy (``stream_raw_images``),
which is what a RAM-bound ramdisk needs for large images.
"""

from __future__ import annotations

import posixpath
from typing import Any
from urllib.parse import urlsplit

from metalforge.drivers.base import StepFailed
from metalforge.netboot import oci

_ALGO_BY_LENGTH = {32: "md5", 40: "sha1", 64: "sha256", 128: "sha512"}


def _hash(info: dict[str, Any]) -> tuple[str, str]:
    algo = info.get("image_os_hash_algo")
    value = info.get("image_os_hash_value")
    if algo and value:
        return str(algo), str(value).lower()
    checksum = info.get("image_checksum")
    if not checksum:
        raise StepFailed(
            "instance_info has no image_checksum (or image_os_hash_algo and "
            "image_os_hash_value): the agent must verify what it writes"
        )
    text = str(checksum)
    if ":" in text:  # "sha256:<hex>", as metalsmith and Ironic accept
        algo_part, _, value_part = text.partition(":")
        return algo_part.lower(), value_part.lower()
    guessed = _ALGO_BY_LENGTH.get(len(text))
    if guessed is None:
        raise StepFailed(f"cannot tell the hash algorithm of image_checksum {text!r}")
    return guessed, text.lower()


def oci_image_info(image: oci.OciImage, node_uuid: str) -> dict[str, Any]:
    """``image_info`` for a disk image in an OCI registry: the blob's URL, the header the
    registry wants, the layer's digest as the hash to check (module ``netboot.oci``)."""
    info: dict[str, Any] = {
        "id": image.manifest or node_uuid,
        "urls": [image.url],
        "container_format": "bare",
        "stream_raw_images": image.disk_format == "raw",
        "image_type": "whole-disk",
        "os_hash_algo": "sha256",
        "os_hash_value": image.sha256,
        "node_uuid": node_uuid,
    }
    if image.disk_format is not None:
        info["disk_format"] = image.disk_format
    authorization = oci.agent_authorization(image)
    if authorization is not None:
        info["image_request_authorization"] = authorization
    return info


def image_info(instance_info: dict[str, Any], node_uuid: str) -> dict[str, Any]:
    """The ``image_info`` argument of the agent's ``write_image`` step."""
    source = instance_info.get("image_source")
    if not source:
        raise StepFailed("instance_info.image_source is not set: nothing to deploy")
    parts = urlsplit(str(source))
    if parts.scheme not in ("http", "https"):
        raise StepFailed(
            f"instance_info.image_source {source!r} is not an http(s) URL the agent can download"
        )
    algo, value = _hash(instance_info)
    if algo == "md5":
        # The agent is told at lookup that md5 is not accepted
        # (agent_md5_checksum_enable); refusing here saves a boot and a download.
        raise StepFailed(
            "image_checksum is an md5 digest, which the agent does not accept; "
            "give a sha256 or sha512 digest (sha256:<hex>)"
        )
    disk_format = str(instance_info.get("image_disk_format") or "raw")
    info: dict[str, Any] = {
        "id": posixpath.basename(parts.path) or node_uuid,
        "urls": [str(source)],
        "disk_format": disk_format,
        "container_format": "bare",
        "stream_raw_images": disk_format == "raw",
        "image_type": "whole-disk",
        "os_hash_algo": algo,
        "os_hash_value": value,
        "node_uuid": node_uuid,
    }
    return info
