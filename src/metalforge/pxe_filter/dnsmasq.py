"""The ``dnsmasq`` driver: one file per MAC in dnsmasq's ``--dhcp-hostsdir``.

dnsmasq reads a file of that directory when a writer closes it or renames it
in (inotify), and skips names starting with a dot. Each file is written to
a dotted temporary name, then renamed over its real name, so dnsmasq never
reads half a file. A file holds one ``dhcp-host`` line: ``MAC`` lets that
machine through (it is *known*), ``MAC,ignore`` makes dnsmasq never answer
it; ``unknown-macs`` holds the wildcard line for every other machine.

dnsmasq only ever adds what it reads: a deleted file's line stays in force
until it is sent SIGHUP, and a rewritten file's new line wins because it is
read last. So while running, the driver never deletes: a MAC the service
forgets keeps its file, rewritten to what an unknown machine gets. Files
are only removed at start, and dnsmasq is then sent SIGHUP (given its pid
file) or must be started after the filter. A file is written only when its
content changes, since every write grows dnsmasq's list until its next
SIGHUP.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

from metalforge.macs import is_stored_mac
from metalforge.pxe_filter.desired import FilterState
from metalforge.pxe_filter.driver import FilterDriver, FilterError

LOG = logging.getLogger(__name__)

UNKNOWN_FILE = "unknown-macs"
"""The file with the wildcard line for MACs no other file names."""
_WILDCARD = "*:*:*:*:*:*"


def _line(mac: str, allowed: bool) -> str:
    return f"{mac}\n" if allowed else f"{mac},ignore\n"


class DnsmasqHostsdir(FilterDriver):
    """Files in ``hostsdir``, which must exist and be readable by dnsmasq's user."""

    name = "dnsmasq"

    def __init__(self, hostsdir: Path, pid_file: Path | None = None) -> None:
        self.hostsdir = hostsdir
        self.pid_file = pid_file
        """dnsmasq's pid file: at start, after the purge, dnsmasq is told to forget
        what it read (SIGHUP), so a running dnsmasq needs no restart."""
        self._written: dict[str, str] = {}
        """File name → content, as this driver last wrote (or found) it."""

    def start(self) -> None:
        if not self.hostsdir.is_dir():
            raise FilterError(f"dhcp-hostsdir {self.hostsdir} is not a directory")
        removed = 0
        for entry in os.scandir(self.hostsdir):
            if entry.is_file(follow_symlinks=False) or entry.is_symlink():
                os.unlink(entry.path)
                removed += 1
        self._written = {}
        if removed:
            LOG.info("removed %d files an earlier run left in %s", removed, self.hostsdir)
        self._write(UNKNOWN_FILE, f"{_WILDCARD},ignore\n")
        if self.pid_file is not None:
            self._reload_dnsmasq(self.pid_file)

    @staticmethod
    def _reload_dnsmasq(pid_file: Path) -> None:
        try:
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGHUP)
        except (OSError, ValueError) as exc:
            raise FilterError(f"cannot signal dnsmasq (pid file {pid_file}): {exc}") from exc
        LOG.info("dnsmasq (pid %d) told to forget what it read from %s", pid, pid_file)

    def apply(self, state: FilterState, *, repair: bool, valid_for: float) -> None:
        # Files cannot expire: the service's watchdog blocks a leader that overstays.
        if repair:
            self._written = self._on_disk()
        wanted = {mac: _line(mac, False) for mac in state.denied}
        wanted.update({mac: _line(mac, True) for mac in state.allowed})
        for name in self._written.keys() - wanted.keys() - {UNKNOWN_FILE}:
            # Forgotten: an unknown machine's rule, kept as a file (see the module's doc).
            wanted[name] = _line(name, state.unknown_allowed)
        # Denials first: a node leaving inspection is refused before anyone is let in.
        changes = sorted(
            (name for name, content in wanted.items() if self._written.get(name) != content),
            key=lambda name: not wanted[name].endswith(",ignore\n"),
        )
        for name in changes:
            self._write(name, wanted[name])
        unknown = f"{_WILDCARD}\n" if state.unknown_allowed else f"{_WILDCARD},ignore\n"
        if self._written.get(UNKNOWN_FILE) != unknown:
            self._write(UNKNOWN_FILE, unknown)

    def block(self) -> None:
        self._written = self._on_disk()
        self._write(UNKNOWN_FILE, f"{_WILDCARD},ignore\n")
        for name, content in sorted(self._written.items()):
            if name != UNKNOWN_FILE and content != _line(name, False):
                self._write(name, _line(name, False))

    def _on_disk(self) -> dict[str, str]:
        """The directory's files as they are (a file someone changed is rewritten)."""
        found: dict[str, str] = {}
        for entry in os.scandir(self.hostsdir):
            name = entry.name
            if name.startswith(".") or not (name == UNKNOWN_FILE or is_stored_mac(name)):
                continue
            with contextlib.suppress(OSError):
                found[name] = Path(entry.path).read_text(encoding="ascii", errors="replace")
        return found

    def _write(self, name: str, content: str) -> None:
        final = self.hostsdir / name
        temporary = self.hostsdir / f".{name}.tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)  # never write through what someone left there
            descriptor = os.open(
                temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644
            )
            os.fchmod(descriptor, 0o644)  # dnsmasq reads as its own, unprivileged user
            with os.fdopen(descriptor, "w", encoding="ascii") as handle:
                handle.write(content)
            os.replace(temporary, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise FilterError(f"cannot write {final}: {exc}") from exc
        self._written[name] = content
