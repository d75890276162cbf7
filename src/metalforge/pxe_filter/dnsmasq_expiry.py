"""The process that expires the dnsmasq filter's allowing lines.

``python -m metalforge.pxe_filter.dnsmasq_expiry HOSTSDIR OWNER_PID``,
started by the ``dnsmasq`` driver in a session of its own. dnsmasq keeps
every line it read, so a leader killed or frozen while it let machines
through would go on answering them; this process outlives it and, once the
deadline the leader last wrote has passed, rewrites every allowing line to
``ignore`` under the directory's lock. It ends when the deadline names
another owner (a new service took the directory over), when nothing is
allowed and its owner is gone, or when the directory is removed.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from metalforge.pxe_filter.dnsmasq import DnsmasqHostsdir, boot_clock, locked, read_deadline

LOG = logging.getLogger(__name__)

POLL = 0.5
"""Seconds between looks at the deadline: how late past it the lines may expire."""


def expire_if_due(driver: DnsmasqHostsdir, owner: int, now: float) -> bool:
    """Deny every line if ``owner``'s deadline has passed; whether it had."""
    with locked(driver.hostsdir):
        deadline = read_deadline(driver.hostsdir)
        if deadline is None or deadline.owner != owner or now < deadline.at:
            return False
        driver.block_locked()
    LOG.error(
        "the PXE filter (pid %d) did not renew its dnsmasq entries in time: "
        "this host now answers nobody",
        owner,
    )
    return True


def watch(hostsdir: Path, owner: int) -> None:
    """Expire ``owner``'s lines whenever they are overdue, until there is no more to watch."""
    driver = DnsmasqHostsdir(hostsdir, expiry=False)
    while hostsdir.is_dir():
        deadline = read_deadline(hostsdir)
        if deadline is not None and deadline.owner != owner:
            return  # another service writes the directory now, with its own expiry
        if deadline is None:
            if os.getppid() != owner:
                return  # its owner is gone and left nothing allowed
            time.sleep(POLL)
            continue
        now = boot_clock()
        if now < deadline.at:
            time.sleep(min(POLL, deadline.at - now))
            continue
        try:
            expire_if_due(driver, owner, now)
        except Exception:  # nothing else expires the entries: keep watching
            LOG.exception("could not expire the dnsmasq entries in %s; retrying", hostsdir)
            time.sleep(POLL)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        hostsdir, owner = Path(argv[0]), int(argv[1])
    except (IndexError, ValueError):
        usage = "usage: python -m metalforge.pxe_filter.dnsmasq_expiry HOSTSDIR OWNER_PID"
        print(usage, file=sys.stderr)
        return 2
    watch(hostsdir, owner)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
