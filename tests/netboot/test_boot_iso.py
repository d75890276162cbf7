"""The agent's boot ISO: built from the deploy kernel and ramdisk, booted by firmware.

A QEMU machine boots the ISO metalforge built from its CD drive, as a BMC's
virtual media presents it, from BIOS (isolinux) and from UEFI (OVMF, GRUB),
and the ramdisk runs with the kernel parameters baked in. The same inputs
give the same bytes. Root only (the machine's NIC is on a bridge), slow.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from metalforge.netboot.iso import NETWORK_DATA_PATH, IsoError, IsoTools, build_iso, iso_key
from metalforge_lab import namespaces, tiny_ramdisk, vm
from tests.support.vm_lab import missing

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MAC = "52:54:00:4d:46:11"
PARAMS = ("ipa-api-url=http://10.251.0.1:6385", "console=ttyS0", "panic=-1", "ipa-debug=1")
BOOT_TIMEOUT = 400.0
"""Seconds from power-on to the ramdisk's first line under software emulation (UEFI is slow)."""


@pytest.fixture(scope="module")
def iso(ramdisk: tiny_ramdisk.TinyRamdisk, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if packages := IsoTools().missing():
        missing(f"missing Debian packages: {', '.join(packages)}")
    if not (vm.OVMF_CODE.exists() and vm.OVMF_VARS.exists()):
        missing("OVMF is not installed (Debian's ovmf)")
    out = tmp_path_factory.mktemp("iso") / "agent.iso"
    build_iso(ramdisk.kernel, ramdisk.initramfs, PARAMS, out)
    return out


@pytest.mark.parametrize("uefi", [False, True], ids=["bios", "uefi"])
def test_firmware_boots_the_iso_into_the_ramdisk_with_its_parameters(
    iso: Path, bridge: namespaces.Bridge, tmp_path: Path, uefi: bool
) -> None:
    machine = vm.NetbootVm(
        f"mfic{os.getpid() % 100000}",
        MAC,
        bridge.name,
        tmp_path / "console.log",
        cdrom=iso,
        uefi=uefi,
    )
    machine.power_on()
    try:
        console = machine.wait_for_console(f"{tiny_ramdisk.MARK} cmdline", BOOT_TIMEOUT)
    finally:
        machine.power_off()
    line = next(x for x in console.splitlines() if x.startswith(f"{tiny_ramdisk.MARK} cmdline"))
    for param in PARAMS:
        assert param in line.split(), console[-2000:]


def test_the_same_inputs_give_the_same_iso(
    ramdisk: tiny_ramdisk.TinyRamdisk, iso: Path, tmp_path: Path
) -> None:
    again = tmp_path / "again.iso"
    build_iso(ramdisk.kernel, ramdisk.initramfs, PARAMS, again)
    assert hashlib.sha256(again.read_bytes()).digest() == hashlib.sha256(iso.read_bytes()).digest()
    other = tmp_path / "other.iso"
    build_iso(ramdisk.kernel, ramdisk.initramfs, (*PARAMS, "ipa-debug=0"), other)
    assert other.read_bytes() != iso.read_bytes()
    assert iso_key("a" * 64, "b" * 64, PARAMS) != iso_key("a" * 64, "b" * 64, PARAMS[:-1])


def test_a_missing_tool_is_named_with_its_package(tmp_path: Path) -> None:
    tools = IsoTools(isolinux_bin=tmp_path / "nowhere" / "isolinux.bin")
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"k")
    with pytest.raises(IsoError, match="install isolinux"):
        build_iso(kernel, kernel, PARAMS, tmp_path / "out.iso", tools)
    assert not (tmp_path / "out.iso").exists()


def test_network_data_goes_on_an_iso_labelled_config_2(
    ramdisk: tiny_ramdisk.TinyRamdisk, iso: Path, tmp_path: Path
) -> None:
    data = b'{"links": [], "networks": [], "services": []}'
    out = tmp_path / "static.iso"
    build_iso(ramdisk.kernel, ramdisk.initramfs, PARAMS, out, network_data=data)
    listed = subprocess.run(
        ["xorriso", "-indev", str(out), "-pvd_info", "-find", "/openstack", "-type", "f"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "Volume Id    : config-2" in listed.stdout + listed.stderr
    assert f"'/{NETWORK_DATA_PATH}'" in listed.stdout
    extracted = tmp_path / "network_data.json"
    subprocess.run(
        ["xorriso", "-osirrox", "on", "-indev", str(out),
         "-extract", f"/{NETWORK_DATA_PATH}", str(extracted)],
        capture_output=True, check=True,
    )  # fmt: skip
    assert extracted.read_bytes() == data
    plain = subprocess.run(
        ["xorriso", "-indev", str(iso), "-pvd_info"], capture_output=True, text=True, check=True
    )
    assert "Volume Id    : METALFORGE_AGENT" in plain.stdout + plain.stderr
    assert iso_key("a" * 64, "b" * 64, PARAMS, data) != iso_key("a" * 64, "b" * 64, PARAMS)
