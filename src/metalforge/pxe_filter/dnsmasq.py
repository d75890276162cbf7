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

dnsmasq cannot expire a line, so the driver's entries that let anyone
through expire by a process of its own (``dnsmasq_expiry``, started with
the driver): the driver writes the leader's deadline (``valid_for`` from
now, on the boot clock) into a dotted file before any allowing line, and
the expiry process rewrites every allowing line to ``ignore`` once the
deadline passes unrenewed. It lives on when the service is killed or
frozen, so a dead leader's host stops answering within its lease. Writers
of the directory (the driver, the expiry process) take ``LOCK_FILE`` first.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from metalforge.macs import is_stored_mac
from metalforge.pxe_filter.desired import FilterState
from metalforge.pxe_filter.driver import FilterDriver, FilterError

LOG = logging.getLogger(__name__)

UNKNOWN_FILE = "unknown-macs"
"""The file with the wildcard line for MACs no other file names."""
_WILDCARD = "*:*:*:*:*:*"

LOCK_FILE = ".metalforge-lock"
"""Taken (flock) by whoever writes the directory; never removed, so all lock one inode."""
DEADLINE_FILE = ".metalforge-allowed-until"
"""While anything is allowed: ``SECONDS OWNER_PID``, when the allowing lines expire
(``boot_clock``) and which process writes them."""


def boot_clock() -> float:
    """Seconds since boot, suspend included: the same for every process of the host."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass(frozen=True)
class Deadline:
    """When the allowing lines expire, and the process whose lines they are."""

    at: float
    owner: int


def read_deadline(hostsdir: Path) -> Deadline | None:
    """The directory's deadline; None when nothing allowing is in force (or it is garbled)."""
    try:
        at, owner = (hostsdir / DEADLINE_FILE).read_text(encoding="ascii").split()
        return Deadline(float(at), int(owner))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


@contextlib.contextmanager
def locked(hostsdir: Path) -> Iterator[None]:
    """Hold the directory's writer lock."""
    try:
        descriptor = os.open(hostsdir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise FilterError(f"cannot lock {hostsdir}: {exc}") from exc
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def _line(mac: str, allowed: bool) -> str:
    return f"{mac}\n" if allowed else f"{mac},ignore\n"


class DnsmasqHostsdir(FilterDriver):
    """Files in ``hostsdir``, which must exist and be readable by dnsmasq's user."""

    name = "dnsmasq"

    def __init__(
        self, hostsdir: Path, pid_file: Path | None = None, *, expiry: bool = True
    ) -> None:
        self.hostsdir = hostsdir
        self.pid_file = pid_file
        """dnsmasq's pid file: at start, after the purge, dnsmasq is told to forget
        what it read (SIGHUP), so a running dnsmasq needs no restart."""
        self.expiry = expiry
        """Run the expiry process (off only where the caller expires the lines itself)."""
        self._written: dict[str, str] = {}
        """File name → content, as this driver last wrote (or found) it."""
        self._expiry_process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if not self.hostsdir.is_dir():
            raise FilterError(f"dhcp-hostsdir {self.hostsdir} is not a directory")
        with locked(self.hostsdir):
            removed = 0
            for entry in os.scandir(self.hostsdir):
                if entry.name == LOCK_FILE:
                    continue
                if entry.is_file(follow_symlinks=False) or entry.is_symlink():
                    os.unlink(entry.path)
                    removed += 1
            self._written = {}
            if removed:
                LOG.info("removed %d files an earlier run left in %s", removed, self.hostsdir)
            self._write(UNKNOWN_FILE, f"{_WILDCARD},ignore\n")
        if self.pid_file is not None:
            self._reload_dnsmasq(self.pid_file)
        self._ensure_expiry()

    def _ensure_expiry(self) -> None:
        """Start the expiry process unless this driver's is running."""
        if not self.expiry:
            return
        if self._expiry_process is not None and self._expiry_process.poll() is None:
            return
        if self._expiry_process is not None:
            LOG.warning(
                "the dnsmasq expiry process ended (%s); starting another",
                self._expiry_process.returncode,
            )
        # Its own session: a signal to the service's process group does not reach it.
        self._expiry_process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "metalforge.pxe_filter.dnsmasq_expiry",
                str(self.hostsdir),
                str(os.getpid()),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    @staticmethod
    def _reload_dnsmasq(pid_file: Path) -> None:
        try:
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGHUP)
        except (OSError, ValueError) as exc:
            raise FilterError(f"cannot signal dnsmasq (pid file {pid_file}): {exc}") from exc
        LOG.info("dnsmasq (pid %d) told to forget what it read from %s", pid, pid_file)

    def apply(self, state: FilterState, *, repair: bool, valid_for: float) -> None:
        with locked(self.hostsdir):
            if state.blocking:
                self._apply(state, repair=repair)
                self._clear_deadline()
                return
            self._ensure_expiry()
            if read_deadline(self.hostsdir) is None:
                repair = True  # the lines may have expired behind this driver's back
            # The deadline first: no allowing line is ever in force without one.
            self._write_deadline(Deadline(boot_clock() + valid_for, os.getpid()))
            self._apply(state, repair=repair)

    def _apply(self, state: FilterState, *, repair: bool) -> None:
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
        with locked(self.hostsdir):
            self.block_locked()

    def close(self) -> None:
        """Stop the expiry process: after the exit's ``block`` nothing is left to expire."""
        process, self._expiry_process = self._expiry_process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def block_locked(self) -> None:
        """Deny every file; the caller holds the directory's lock."""
        self._written = self._on_disk()
        self._write(UNKNOWN_FILE, f"{_WILDCARD},ignore\n")
        for name, content in sorted(self._written.items()):
            if name != UNKNOWN_FILE and content != _line(name, False):
                self._write(name, _line(name, False))
        self._clear_deadline()

    def _write_deadline(self, deadline: Deadline) -> None:
        self._write(DEADLINE_FILE, f"{deadline.at:.3f} {deadline.owner}\n", remember=False)

    def _clear_deadline(self) -> None:
        try:
            os.unlink(self.hostsdir / DEADLINE_FILE)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise FilterError(f"cannot remove {self.hostsdir / DEADLINE_FILE}: {exc}") from exc

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

    def _write(self, name: str, content: str, *, remember: bool = True) -> None:
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
        if remember:
            self._written[name] = content
