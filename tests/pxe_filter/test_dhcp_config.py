"""What the DHCP service is told: the dnsmasq configuration metalforge writes, and the
settings it refuses before writing one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from metalforge.config import Settings, load_settings
from metalforge.pxe_filter.dhcp import render_config

RANGE = {"range_start": "10.251.0.100", "range_end": "10.251.0.199"}


def _settings(tmp_path: Path, *, driver: str = "dnsmasq", **dhcp: Any) -> Settings:
    return load_settings(
        state_dir=str(tmp_path),
        api={"agent_host": "10.251.0.1", "agent_port": 6388},
        pxe_filter={
            "driver": driver,
            "interface": "br-prov",
            "dnsmasq_hostsdir": str(tmp_path / "hostsdir"),
        },
        dhcp={"enabled": True, "interface": "br-prov", **dhcp},
    )


def _lines(settings: Settings) -> list[str]:
    return render_config(settings).splitlines()


def test_dhcp_mode_answers_whom_the_filter_names_and_chainloads_ipxe(tmp_path: Path) -> None:
    settings = _settings(tmp_path, **RANGE, lease_time=900)
    lines = _lines(settings)
    assert "interface=br-prov" in lines
    assert "port=0" in lines  # no DNS service
    assert "dhcp-range=10.251.0.100,10.251.0.199,900" in lines
    assert f"dhcp-hostsdir={tmp_path / 'hostsdir'}" in lines
    assert "dhcp-ignore=tag:!known" in lines
    assert "dhcp-boot=tag:ipxe,http://10.251.0.1:6388/boot.ipxe" in lines
    assert "dhcp-boot=tag:!ipxe,tag:!http64,tag:efi64,snponly.efi" in lines
    assert "dhcp-boot=tag:!ipxe,tag:!http64,tag:!efi64,undionly.kpxe" in lines
    # UEFI HTTP boot: the UEFI binary from metalforge, in an offer marked for HTTP boot.
    url = "http://10.251.0.1:6388/boot/firmware/snponly.efi"
    assert f"dhcp-boot=tag:!ipxe,tag:http64,{url}" in lines
    assert "dhcp-option-force=tag:!ipxe,tag:http64,option:vendor-class,HTTPClient" in lines
    assert "tftp-root=/usr/lib/ipxe" in lines
    # No gateway or name server unless given: dnsmasq would offer itself as both.
    assert "dhcp-option=option:router" in lines
    assert "dhcp-option=option:dns-server" in lines
    # The filter signals the dnsmasq it runs, through the pid file written here.
    assert settings.pxe_filter.dnsmasq_pid_file == tmp_path / "dhcp" / "dnsmasq.pid"
    assert f"pid-file={tmp_path / 'dhcp' / 'dnsmasq.pid'}" in lines
    assert not any(line.startswith("user=") for line in lines)


def test_gateway_name_servers_and_user_are_given_when_set(tmp_path: Path) -> None:
    lines = _lines(
        _settings(
            tmp_path,
            **RANGE,
            router="10.251.0.254",
            dns_servers=["10.251.0.2", "10.251.0.3"],
            run_as="dnsmasq",
            log_dhcp=False,
        )
    )
    assert "dhcp-option=option:router,10.251.0.254" in lines
    assert "dhcp-option=option:dns-server,10.251.0.2,10.251.0.3" in lines
    assert "user=dnsmasq" in lines
    assert "log-dhcp" not in lines


def test_proxy_mode_gives_no_addresses_and_offers_boot_services(tmp_path: Path) -> None:
    lines = _lines(_settings(tmp_path, mode="proxy", proxy_subnet="10.251.0.0/24"))
    assert "dhcp-range=10.251.0.0,proxy,255.255.255.0" in lines
    assert not any(line.startswith("dhcp-boot=") for line in lines)
    assert 'pxe-service=tag:ipxe,x86PC,"metalforge",http://10.251.0.1:6388/boot.ipxe' in lines
    assert 'pxe-service=tag:!ipxe,x86PC,"iPXE",undionly.kpxe' in lines
    assert 'pxe-service=tag:!ipxe,X86-64_EFI,"iPXE",snponly.efi' in lines


def test_a_firewall_filter_leaves_the_hosts_directory_out(tmp_path: Path) -> None:
    lines = _lines(_settings(tmp_path, driver="nftables", **RANGE))
    assert not any(line.startswith("dhcp-hostsdir=") for line in lines)
    assert "dhcp-ignore=tag:!known" not in lines  # the firewall drops the others


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"driver": "noop", **RANGE}, "dhcp.enabled needs a pxe_filter.driver"),
        ({}, "dhcp.mode dhcp needs dhcp.range_start and dhcp.range_end"),
        (
            {"range_start": "10.251.0.200", "range_end": "10.251.0.100"},
            "range_start must not come after",
        ),
        ({"mode": "proxy"}, "dhcp.mode proxy needs dhcp.proxy_subnet"),
        ({"range_start": "10.251.0.300", "range_end": "10.251.0.1"}, "IPv4 address"),
        ({**RANGE, "interface": "br prov"}, "String should match pattern"),
        ({**RANGE, "bios_boot_file": "../etc/shadow"}, "String should match pattern"),
        ({**RANGE, "tftp_root": "/srv/tftp\nuser=root"}, "tftp_root must not contain control"),
        ({**RANGE, "run_as": "root\n"}, "String should match pattern"),
        ({**RANGE, "lease_time": 10}, "greater than or equal to 120"),
        ({**RANGE, "dns_servers": ["10.0.0.1"] * 4}, "at most 3 items"),
        ({**RANGE, "surprise": 1}, "Extra inputs are not permitted"),
    ],
    ids=[
        "no-filter",
        "no-range",
        "range-backwards",
        "proxy-without-subnet",
        "not-an-address",
        "interface-with-space",
        "boot-file-path",
        "newline-in-path",
        "newline-in-user",
        "lease-too-short",
        "too-many-dns",
        "unknown-key",
    ],
)
def test_settings_that_cannot_work_are_refused(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    fields = dict(change)
    driver = fields.pop("driver", "dnsmasq")
    with pytest.raises(ValidationError, match=message):
        _settings(tmp_path, driver=driver, **fields)


def test_a_firewall_filter_must_guard_the_dhcp_interface(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"pxe_filter.interface \(br-pxe\) must be dhcp"):
        load_settings(
            state_dir=str(tmp_path),
            api={"agent_host": "10.251.0.1"},
            pxe_filter={"driver": "nftables"},
            dhcp={"enabled": True, "interface": "br-prov", **RANGE},
        )


def test_ipxe_must_be_told_a_reachable_address(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"dhcp\.enabled needs conductor\.netboot\.http_url"):
        load_settings(
            state_dir=str(tmp_path),
            api={"agent_host": "0.0.0.0"},
            pxe_filter={"driver": "dnsmasq"},
            dhcp={"enabled": True, **RANGE},
        )


def test_disabled_it_needs_nothing(tmp_path: Path) -> None:
    settings = load_settings(state_dir=str(tmp_path))
    assert settings.dhcp.enabled is False
    assert settings.pxe_filter.dnsmasq_pid_file is None
