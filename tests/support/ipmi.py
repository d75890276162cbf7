"""IPMI peers for tests: the simulator in a child process, ``ipmitool``, an ``ipmi`` stack.

The simulator runs in its own process because pyghmi's server and client
share class-level session state; metalforge's driver is the client here.
``ipmitool`` is the independent witness: what metalforge did must be what a
stock client sees.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge.drivers.catalog import HARDWARE_TYPES
from metalforge.drivers.ipmi.client import SESSIONS
from metalforge_lab.ipmi_bmc import BmcProcess
from metalforge_lab.ports import free_udp_ports as free_udp_ports
from tests.support.stack import Stack, start_stack, test_settings

USER = "admin"
PASSWORD = "password"

IPMI_HARDWARE = HARDWARE_TYPES["ipmi"]
"""The product's ``ipmi`` hardware type."""


# Three tries of two seconds: the simulator is Python on a loaded two-core machine, and
# one try of one second made a status read fail now and then ("Unable to establish IPMI
# v2 / RMCP+ session"). A refused password is answered at once, retries or not.
_IPMITOOL = ("ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-R", "3", "-N", "2")


def ipmitool(port: int, *args: str, password: str = PASSWORD, check: bool = True) -> str:
    """Run ``ipmitool -I lanplus`` against the simulator on ``port``; its output."""
    result = subprocess.run(
        [*_IPMITOOL, "-p", str(port), "-U", USER, "-P", password, *args],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"ipmitool {' '.join(args)} failed: {result.stderr}")
    return result.stdout + result.stderr


def power_status(port: int) -> str:
    """``on`` or ``off`` as ipmitool reads it."""
    return ipmitool(port, "power", "status").strip().rsplit(" ", 1)[-1]


def driver_info(port: int, **extra: Any) -> dict[str, Any]:
    """``driver_info`` of a node whose BMC is the simulator on ``port``; short timeouts."""
    return {
        "ipmi_address": "127.0.0.1",
        "ipmi_port": port,
        "ipmi_username": USER,
        "ipmi_password": PASSWORD,
        # The simulator is Python sharing two cores with parallel test workers (and,
        # in the coverage pass, the tracer): a reply can take seconds. A refused
        # password is answered at once anyway.
        "ipmi_timeout": 10,
        "ipmi_retries": 2,
        "ipmi_power_timeout": 10,
        **extra,
    }


def require_ipmitool() -> None:
    if shutil.which("ipmitool") is None:
        pytest.skip("ipmitool is not installed (apt-get install ipmitool)")


def start_bmcs(tmp_path: Path, count: int = 1, **options: Any) -> Iterator[BmcProcess]:
    """A simulator serving ``count`` BMCs; yields it and stops it, forgetting cached sessions.

    The driver's sessions outlive a test; a new simulator on reused ports
    would not know them, so they are dropped with the simulator.
    """
    require_ipmitool()
    bmcs = BmcProcess(
        port=free_udp_ports(count),
        count=count,
        user=USER,
        password=PASSWORD,
        log_path=tmp_path / "ipmi-bmc.log",
        **options,
    )
    bmcs.start()
    try:
        yield bmcs
    finally:
        bmcs.stop()
        SESSIONS.forget()


def start_ipmi_stack(db_url: str) -> Stack:
    """An in-process API and conductor with the ``ipmi`` hardware type enabled."""
    return start_stack(test_settings(db_url, enabled_hardware_types=["fake-hardware", "ipmi"]))
