"""The dnsmasq filter's allowing lines expire when their leader stops renewing them.

dnsmasq keeps what it read, so a killed or frozen leader's host would answer
for ever; a process of the driver's own expires the lines. The owners here
are real processes, killed and stopped as a crashed or frozen service is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from metalforge.pxe_filter.desired import FilterState
from metalforge.pxe_filter.dnsmasq import (
    DEADLINE_FILE,
    UNKNOWN_FILE,
    Deadline,
    DnsmasqHostsdir,
    boot_clock,
    read_deadline,
)
from metalforge.pxe_filter.dnsmasq_expiry import expire_if_due
from tests.pxe_filter.conftest import mac
from tests.support.api import wait_until

ALLOWING = FilterState(frozenset({mac(1)}), frozenset({mac(2)}), unknown_allowed=True)
DENY_ALL = {
    mac(1): f"{mac(1)},ignore\n",
    mac(2): f"{mac(2)},ignore\n",
    UNKNOWN_FILE: "*:*:*:*:*:*,ignore\n",
}


@pytest.fixture
def hostsdir(tmp_path: Path) -> Path:
    path = tmp_path / "hostsdir"
    path.mkdir()
    return path


def _lines(hostsdir: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in hostsdir.iterdir() if not p.name.startswith(".")}


def test_allowing_writes_a_deadline_first_and_blocking_removes_it(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    assert read_deadline(hostsdir) is None
    before = boot_clock()
    driver.apply(ALLOWING, repair=False, valid_for=30.0)
    deadline = read_deadline(hostsdir)
    assert deadline is not None
    assert deadline.owner == os.getpid()
    # (Written to the millisecond.)
    assert before + 30.0 - 0.001 <= deadline.at <= boot_clock() + 30.0 + 0.001
    driver.apply(
        FilterState(frozenset(), frozenset({mac(1), mac(2)}), unknown_allowed=False),
        repair=False,
        valid_for=30.0,
    )
    assert read_deadline(hostsdir) is None  # nothing allowed: nothing to expire
    driver.apply(ALLOWING, repair=False, valid_for=30.0)
    driver.block()
    assert read_deadline(hostsdir) is None


def test_an_overdue_deadline_denies_every_line_and_only_its_owners(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    driver.apply(ALLOWING, repair=False, valid_for=30.0)
    deadline = read_deadline(hostsdir)
    assert deadline is not None
    assert not expire_if_due(driver, os.getpid(), deadline.at - 1)  # not yet
    assert not expire_if_due(driver, os.getpid() + 1, deadline.at + 1)  # someone else's
    assert _lines(hostsdir)[mac(1)] == f"{mac(1)}\n"
    assert expire_if_due(driver, os.getpid(), deadline.at)
    assert _lines(hostsdir) == DENY_ALL
    assert read_deadline(hostsdir) is None


def test_a_renewal_after_expiry_writes_the_allowing_lines_again(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    driver.apply(ALLOWING, repair=False, valid_for=30.0)
    expired = DnsmasqHostsdir(hostsdir, expiry=False)
    assert expire_if_due(expired, os.getpid(), boot_clock() + 60)
    # The driver remembers what it wrote; the missing deadline tells it to look again.
    driver.apply(ALLOWING, repair=False, valid_for=30.0)
    assert _lines(hostsdir)[mac(1)] == f"{mac(1)}\n"
    assert _lines(hostsdir)[UNKNOWN_FILE] == "*:*:*:*:*:*\n"


def test_a_garbled_deadline_reads_as_none(hostsdir: Path) -> None:
    (hostsdir / DEADLINE_FILE).write_text("soon\n")
    assert read_deadline(hostsdir) is None
    (hostsdir / DEADLINE_FILE).write_text("12.5 77\n")
    assert read_deadline(hostsdir) == Deadline(12.5, 77)


OWNER = """
import sys, time
from pathlib import Path
from metalforge.pxe_filter.desired import FilterState
from metalforge.pxe_filter.dnsmasq import DnsmasqHostsdir
driver = DnsmasqHostsdir(Path(sys.argv[1]))
driver.start()
state = FilterState(frozenset({sys.argv[2]}), frozenset({sys.argv[3]}), unknown_allowed=True)
while True:
    driver.apply(state, repair=False, valid_for=3.0)
    print("renewed", flush=True)
    time.sleep(0.5)
"""


def _expiry_processes(hostsdir: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"metalforge.pxe_filter.dnsmasq_expiry" in argv and str(hostsdir).encode() in argv:
            found.append(int(entry.name))
    return found


@pytest.fixture
def owner(hostsdir: Path, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A service that leads and keeps renewing its lines every half second."""
    root = Path(__file__).resolve().parents[2]
    out = (tmp_path / "owner.out").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(hostsdir), mac(1), mac(2)],
        stdout=out,
        cwd=root,
    )
    try:
        wait_until(
            "the owner to renew twice",
            lambda: (tmp_path / "owner.out").read_text().count("renewed") >= 2,
            timeout=60,
        )
        assert _lines(hostsdir)[mac(1)] == f"{mac(1)}\n"
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait()
        for pid in _expiry_processes(hostsdir):
            os.kill(pid, signal.SIGKILL)
        out.close()


def test_a_killed_owners_lines_expire_and_the_expiry_process_ends(
    hostsdir: Path, owner: subprocess.Popen[bytes]
) -> None:
    assert len(_expiry_processes(hostsdir)) == 1
    owner.kill()
    owner.wait()
    wait_until("the lines to expire", lambda: _lines(hostsdir) == DENY_ALL, timeout=60)
    assert read_deadline(hostsdir) is None
    wait_until("the expiry process to end", lambda: not _expiry_processes(hostsdir), timeout=60)


def test_a_frozen_owners_lines_expire(hostsdir: Path, owner: subprocess.Popen[bytes]) -> None:
    owner.send_signal(signal.SIGSTOP)
    wait_until("the lines to expire", lambda: _lines(hostsdir) == DENY_ALL, timeout=60)
    assert _expiry_processes(hostsdir)  # its owner lives: it goes on watching


def test_a_clean_stop_ends_the_expiry_process(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir)
    driver.start()
    driver.apply(ALLOWING, repair=False, valid_for=600.0)
    wait_until("the expiry process", lambda: len(_expiry_processes(hostsdir)) == 1, timeout=60)
    driver.block()
    driver.close()
    assert not _expiry_processes(hostsdir)
    assert _lines(hostsdir) == DENY_ALL
