"""Fixtures of the tests that boot QEMU machines (``tests.support.vm_lab``)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator

import pytest

from metalforge_lab import namespaces, tiny_ramdisk
from tests.support.vm_lab import DnsmasqLog, require, watching_dnsmasq


@pytest.fixture(scope="module")
def ramdisk(tmp_path_factory: pytest.TempPathFactory) -> tiny_ramdisk.TinyRamdisk:
    require()
    return tiny_ramdisk.build(tmp_path_factory.mktemp("tiny-ramdisk"))


@pytest.fixture
def bridge() -> Iterator[namespaces.Bridge]:
    subnet = ipaddress.IPv4Network(namespaces.free_subnet(seed=os.getpid() + 32))
    created = namespaces.Bridge(f"mfvm{os.getpid() % 100000}", subnet)
    created.create()
    try:
        yield created
    finally:
        created.delete()


@pytest.fixture
def dnsmasq_log() -> Iterator[DnsmasqLog]:
    with watching_dnsmasq() as handler:
        yield handler
