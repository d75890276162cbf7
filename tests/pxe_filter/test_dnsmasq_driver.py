"""The dnsmasq driver's files: what dnsmasq reads, written so it never reads half of one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from metalforge.pxe_filter.desired import FilterState
from metalforge.pxe_filter.dnsmasq import (
    DEADLINE_FILE,
    LOCK_FILE,
    UNKNOWN_FILE,
    DnsmasqHostsdir,
)
from metalforge.pxe_filter.driver import FilterError
from tests.pxe_filter.conftest import mac

CONTROL_FILES = {LOCK_FILE, DEADLINE_FILE}


def _files(hostsdir: Path) -> dict[str, str]:
    """What dnsmasq reads (the driver's own dotted control files aside)."""
    paths = sorted(hostsdir.iterdir())
    return {p.name: p.read_text() for p in paths if p.name not in CONTROL_FILES}


def _temporaries(hostsdir: Path) -> list[str]:
    return [n for n in os.listdir(hostsdir) if n.endswith(".tmp")]


def _state(allowed: set[str], denied: set[str], unknown: bool = False) -> FilterState:
    return FilterState(frozenset(allowed), frozenset(denied), unknown_allowed=unknown)


@pytest.fixture
def hostsdir(tmp_path: Path) -> Path:
    path = tmp_path / "hostsdir"
    path.mkdir()
    return path


def test_start_purges_what_an_earlier_run_left_and_blocks_unknown_machines(hostsdir: Path) -> None:
    (hostsdir / mac(9)).write_text(f"{mac(9)}\n")
    (hostsdir / "leftover.conf").write_text("*:*:*:*:*:*\n")
    DnsmasqHostsdir(hostsdir, expiry=False).start()
    assert _files(hostsdir) == {UNKNOWN_FILE: "*:*:*:*:*:*,ignore\n"}


def test_one_file_per_mac_allowed_bare_denied_ignored(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    driver.apply(_state({mac(1)}, {mac(2), mac(3)}, unknown=True), repair=False, valid_for=0.0)
    assert _files(hostsdir) == {
        mac(1): f"{mac(1)}\n",
        mac(2): f"{mac(2)},ignore\n",
        mac(3): f"{mac(3)},ignore\n",
        UNKNOWN_FILE: "*:*:*:*:*:*\n",
    }
    # dnsmasq drops root: every file must be readable by its user.
    assert all(
        p.stat().st_mode & stat.S_IROTH for p in hostsdir.iterdir() if p.name not in CONTROL_FILES
    )


def test_only_changed_files_are_written(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    driver.apply(_state({mac(1)}, {mac(2)}), repair=False, valid_for=0.0)
    before = {p.name: p.stat().st_ino for p in hostsdir.iterdir() if p.name not in CONTROL_FILES}
    driver.apply(_state({mac(1)}, {mac(2)}), repair=False, valid_for=0.0)
    assert {
        p.name: p.stat().st_ino for p in hostsdir.iterdir() if p.name not in CONTROL_FILES
    } == before
    driver.apply(_state(set(), {mac(1), mac(2)}), repair=False, valid_for=0.0)
    after = {p.name: p.stat().st_ino for p in hostsdir.iterdir() if p.name not in CONTROL_FILES}
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {mac(1)}


def test_a_forgotten_mac_keeps_its_file_with_the_unknown_machines_rule(hostsdir: Path) -> None:
    """dnsmasq keeps a deleted file's line until SIGHUP, so files are rewritten, never deleted."""
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    driver.apply(_state({mac(1)}, {mac(2)}), repair=False, valid_for=0.0)
    driver.apply(_state(set(), set(), unknown=True), repair=False, valid_for=0.0)
    assert _files(hostsdir)[mac(1)] == f"{mac(1)}\n"
    assert _files(hostsdir)[mac(2)] == f"{mac(2)}\n"
    driver.apply(_state(set(), set(), unknown=False), repair=False, valid_for=0.0)
    assert _files(hostsdir)[mac(1)] == f"{mac(1)},ignore\n"


def test_files_are_renamed_into_place_no_temporary_is_left(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    driver.apply(
        _state({mac(i) for i in range(50)}, {mac(i) for i in range(50, 100)}),
        repair=False,
        valid_for=0.0,
    )
    assert len(_files(hostsdir)) == 101
    assert not _temporaries(hostsdir)


def test_repair_rewrites_what_someone_changed_on_disk(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    wanted = _state({mac(1)}, {mac(2)})
    driver.apply(wanted, repair=False, valid_for=0.0)
    (hostsdir / mac(2)).write_text(f"{mac(2)}\n")  # someone lets a denied node through
    driver.apply(wanted, repair=False, valid_for=0.0)
    assert _files(hostsdir)[mac(2)] == f"{mac(2)}\n"  # it trusts what it wrote...
    driver.apply(wanted, repair=True, valid_for=0.0)
    assert _files(hostsdir)[mac(2)] == f"{mac(2)},ignore\n"  # ...until the resync checks


def test_block_denies_every_file_without_the_database(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    driver.apply(_state({mac(1), mac(2)}, {mac(3)}, unknown=True), repair=False, valid_for=0.0)
    DnsmasqHostsdir(hostsdir, expiry=False).block()  # a new instance: nothing remembered
    assert _files(hostsdir) == {
        mac(1): f"{mac(1)},ignore\n",
        mac(2): f"{mac(2)},ignore\n",
        mac(3): f"{mac(3)},ignore\n",
        UNKNOWN_FILE: "*:*:*:*:*:*,ignore\n",
    }


def test_a_missing_hostsdir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FilterError, match="not a directory"):
        DnsmasqHostsdir(tmp_path / "missing", expiry=False).start()


def test_an_unwritable_hostsdir_is_an_error_and_leaves_no_temporary(hostsdir: Path) -> None:
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    (hostsdir / mac(1)).mkdir()  # a file cannot be renamed over a directory
    with pytest.raises(FilterError, match="cannot write"):
        driver.apply(_state({mac(1)}, set()), repair=False, valid_for=0.0)
    assert not _temporaries(hostsdir)


def test_a_planted_temporary_symlink_is_not_written_through(hostsdir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    driver.start()
    (hostsdir / f".{mac(1)}.tmp").symlink_to(victim)
    driver.apply(_state({mac(1)}, set()), repair=False, valid_for=0.0)
    assert victim.read_text() == "precious\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert _files(hostsdir)[mac(1)] == f"{mac(1)}\n"
