"""What network-booting machines fetch: ``/boot.ipxe``, ``/boot/{mac}.ipxe``,
``/boot/images/{sha256}`` and ``/boot/firmware/{name}``, without credentials, on the
agents' endpoint.

What each answers, and to whom, is in ``services.netboot``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, PlainTextResponse

from metalforge.api.wiring import services
from metalforge.errors import not_found
from metalforge.services import netboot

router = APIRouter(tags=["network boot"])

SCRIPT_SUFFIX = ".ipxe"


@router.get("/boot.ipxe", summary="The chain script DHCP hands iPXE clients")
def chain_script(request: Request) -> PlainTextResponse:
    return PlainTextResponse(netboot.chain_script(services(request)))


# Files answer HEAD too: UEFI HTTP boot asks for the size of what it is to load
# first, and BMCs check a virtual-media URL before they insert it.
FILE_METHODS = ["GET", "HEAD"]


@router.api_route(
    "/boot/images/{digest}",
    methods=FILE_METHODS,
    summary="A deploy kernel, ramdisk or boot ISO, by its SHA-256",
)
def boot_image(request: Request, digest: str) -> FileResponse:
    image = netboot.image(services(request), digest)
    return FileResponse(image.path, media_type="application/octet-stream")


@router.api_route(
    "/boot/firmware/{name}", methods=FILE_METHODS, summary="The iPXE binary UEFI HTTP boot loads"
)
def boot_firmware(request: Request, name: str) -> FileResponse:
    path = netboot.firmware(services(request), name)
    return FileResponse(path, media_type="application/efi")


@router.get("/boot/{name}", summary="The iPXE script of the machine with this MAC address")
def node_script(request: Request, name: str) -> PlainTextResponse:
    if not name.endswith(SCRIPT_SUFFIX):
        raise not_found("No boot script for this machine now.")
    script = netboot.node_script(services(request), name.removesuffix(SCRIPT_SUFFIX))
    # iPXE must not keep a script: the next boot may be for another flow.
    return PlainTextResponse(script.text, headers={"Cache-Control": "no-store"})
