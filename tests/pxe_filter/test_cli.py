"""The ``metalforge pxe-filter`` role and the all-in-one's filter, as processes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pydantic
import pytest

from metalforge import cli
from metalforge import inspection_states as ins
from metalforge.config import PxeFilterSettings
from metalforge.db.engine import Database
from metalforge.db.models import PxeFilterHost
from metalforge.pxe_filter.service import STATUS_EVERY
from metalforge.startup import StartupError
from metalforge_lab.ports import free_port
from tests.pxe_filter.conftest import add_node
from tests.support.api import wait_until
from tests.support.processes import ProcessGroup

MAC = "52:54:00:cc:00:01"


def _config(tmp_path: Path, driver: str, hostsdir: Path) -> Path:
    path = tmp_path / "metalforge.toml"
    path.write_text(
        f'state_dir = "{tmp_path}"\n'
        f'[database]\nurl = "sqlite:///{tmp_path}/metalforge.sqlite"\n'
        f"[api]\nport = {free_port()}\n"
        f"[inspector]\nport = {free_port()}\n"
        '[conductor]\nhostname = "aio"\n'
        f'[pxe_filter]\ndriver = "{driver}"\nhostname = "aio-filter"\n'
        f'dnsmasq_hostsdir = "{hostsdir}"\n'
    )
    return path


def test_the_all_in_one_runs_the_filter_and_leaves_it_blocking_at_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostsdir = tmp_path / "hostsdir"
    hostsdir.mkdir()
    config = _config(tmp_path, "dnsmasq", hostsdir)
    db = Database(f"sqlite:///{tmp_path}/metalforge.sqlite")
    db.upgrade()
    add_node(db, MAC, inspection=ins.WAITING)
    with ProcessGroup(tmp_path, config) as group:
        service = group.spawn("all-in-one", "all-in-one", {})
        wait_until(
            "the inspected node to be allowed",
            lambda: (hostsdir / MAC).is_file() and (hostsdir / MAC).read_text() == f"{MAC}\n",
            timeout=60,
        )
        # The files are written before the status row, so the row may lag them.
        listing = ""

        def status_shows_passing() -> bool:
            nonlocal listing
            cli.main(["--config", str(config), "pxe-filter", "status"])
            listing = capsys.readouterr().out
            return "passing" in listing

        wait_until("the status to show the filter passing", status_shows_passing, timeout=60)
        assert "aio-filter" in listing
        # SIGTERM; the exit waits out the server's graceful shutdown and the conductor's
        # stop, which a loaded machine may stretch: a kill here would prove nothing.
        service.stop(timeout=60)
        assert service.proc is not None
        assert service.proc.returncode == 0, "the service did not exit by itself"
        assert "PXE filter" in group.logs()
        assert (hostsdir / MAC).read_text() == f"{MAC},ignore\n"
        assert (hostsdir / "unknown-macs").read_text() == "*:*:*:*:*:*,ignore\n"
    cli.main(["--config", str(config), "pxe-filter", "status"])
    assert "stopped" in capsys.readouterr().out
    db.dispose()


def test_status_before_any_host_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, "dnsmasq", tmp_path)
    Database(f"sqlite:///{tmp_path}/metalforge.sqlite").upgrade()
    cli.main(["--config", str(config), "pxe-filter", "status"])
    assert "no PXE filter host has reported" in capsys.readouterr().out


def test_block_denies_what_a_killed_filter_left_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostsdir = tmp_path / "hostsdir"
    hostsdir.mkdir()
    (hostsdir / MAC).write_text(f"{MAC}\n")
    (hostsdir / "unknown-macs").write_text("*:*:*:*:*:*\n")
    config = _config(tmp_path, "dnsmasq", hostsdir)
    Database(f"sqlite:///{tmp_path}/metalforge.sqlite").upgrade()
    cli.main(["--config", str(config), "pxe-filter", "block"])
    assert "answers nobody" in capsys.readouterr().out
    assert (hostsdir / MAC).read_text() == f"{MAC},ignore\n"
    assert (hostsdir / "unknown-macs").read_text() == "*:*:*:*:*:*,ignore\n"


def test_the_role_with_the_noop_driver_refuses_to_start(tmp_path: Path) -> None:
    config = _config(tmp_path, "noop", tmp_path)
    with pytest.raises(StartupError, match="noop: there is nothing to run"):
        cli.main(["--config", str(config), "pxe-filter"])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"leader_lease": 2.0, "election_interval": 1.0}, "must exceed two election intervals"),
        ({"sync_period": 31}, "less than or equal to 30"),
        ({"sync_period": -1}, "greater than or equal to 0"),
        ({"driver": "ipset"}, "'noop', 'dnsmasq', 'iptables' or 'nftables'"),
        ({"interface": 'br0"; drop'}, "String should match pattern"),
        ({"table": "bad table"}, "String should match pattern"),
    ],
)
def test_settings_that_cannot_work_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        PxeFilterSettings.model_validate(settings)


def test_a_separate_filter_process_on_sqlite_is_refused(tmp_path: Path) -> None:
    """It would never hear of changes: on SQLite only the writing process is woken."""
    config = _config(tmp_path, "dnsmasq", tmp_path)
    Database(f"sqlite:///{tmp_path}/metalforge.sqlite").upgrade()
    with pytest.raises(StartupError, match="needs PostgreSQL"):
        cli.main(["--config", str(config), "pxe-filter"])


def test_status_marks_a_host_silent_for_three_periods_as_gone() -> None:
    now = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)

    def host(name: str, silent: float) -> PxeFilterHost:
        return PxeFilterHost(
            hostname=name,
            driver="nftables",
            mode="passing",
            allowed=1,
            denied=2,
            unknown_allowed=False,
            synced_at=now,
            error=None,
            updated_at=now - dt.timedelta(seconds=silent),
        )

    listing = cli.render_filter_hosts(
        [host("alive", STATUS_EVERY), host("dead", 3 * STATUS_EVERY)], now
    )
    alive, dead = listing.splitlines()[1:]
    assert "10s ago" in alive
    assert "gone?" in dead
