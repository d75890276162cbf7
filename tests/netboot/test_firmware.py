"""``/boot/firmware/{name}``: the iPXE binary UEFI HTTP boot firmware is told to fetch.

Served without credentials on the agents' endpoint, only while metalforge
runs the DHCP service that tells firmware of it, and only that one file of
``dhcp.tftp_root``: nothing else of the directory, and nothing outside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metalforge.config import load_settings
from tests.support.stack import FAST_CONDUCTOR, Stack, start_stack

EFI = b"MZ an iPXE EFI binary"


def _stack(tmp_path: Path, *, enabled: bool) -> Stack:
    tftp = tmp_path / "tftp"
    tftp.mkdir(exist_ok=True)
    (tftp / "snponly.efi").write_bytes(EFI)
    (tftp / "undionly.kpxe").write_bytes(b"a BIOS binary")
    (tmp_path / "secret").write_text("not for the network")
    return start_stack(
        load_settings(
            state_dir=str(tmp_path / "state"),
            database={"url": f"sqlite:///{tmp_path}/metalforge.sqlite"},
            conductor={**FAST_CONDUCTOR, "hostname": "test-conductor"},
            api={"agent_host": "10.251.0.1"},
            pxe_filter={"driver": "dnsmasq", "dnsmasq_hostsdir": str(tmp_path / "hostsdir")},
            dhcp={
                "enabled": enabled,
                "range_start": "10.251.0.100",
                "range_end": "10.251.0.199",
                "tftp_root": str(tftp),
            },
        )
    )


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    running = _stack(tmp_path, enabled=True)
    try:
        yield running
    finally:
        running.stop()


def test_the_uefi_binary_is_served_to_anyone(stack: Stack) -> None:
    answer = stack.client.get("/boot/firmware/snponly.efi")
    assert answer.status_code == 200, answer.text
    assert answer.content == EFI
    assert answer.headers["content-type"] == "application/efi"
    # UEFI HTTP boot asks for the size first (OVMF: "Could not retrieve NBP file size").
    head = stack.client.head("/boot/firmware/snponly.efi")
    assert head.status_code == 200
    assert head.headers["content-length"] == str(len(EFI))
    assert head.content == b""


@pytest.mark.parametrize(
    "path",
    [
        "/boot/firmware/undionly.kpxe",  # in the directory, but not what HTTP boot is told
        "/boot/firmware/..%2Fsecret",
        "/boot/firmware/%2E%2E%2Fsecret",
        "/boot/firmware/",
        "/boot/firmware/snponly.efi/x",
    ],
)
def test_nothing_else_is_served(stack: Stack, path: str) -> None:
    answer = stack.client.get(path)
    assert answer.status_code == 404, answer.text
    assert b"not for the network" not in answer.content


def test_without_the_dhcp_service_there_is_nothing(tmp_path: Path) -> None:
    running = _stack(tmp_path, enabled=False)
    try:
        assert running.client.get("/boot/firmware/snponly.efi").status_code == 404
    finally:
        running.stop()
