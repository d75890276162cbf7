"""Building a host's PXE filter from the settings, with the wake-ups that drive it."""

from __future__ import annotations

import logging

from metalforge.config import Settings
from metalforge.coordination.election import SqlElector
from metalforge.db.changes import ChangeFeed
from metalforge.db.engine import Database
from metalforge.pxe_filter.dhcp import DhcpServer
from metalforge.pxe_filter.dnsmasq import DnsmasqHostsdir
from metalforge.pxe_filter.driver import FilterDriver
from metalforge.pxe_filter.nftables import NftablesFilter
from metalforge.pxe_filter.service import PxeFilter

LOG = logging.getLogger(__name__)


def build_driver(settings: Settings) -> FilterDriver | None:
    """The configured driver; None for ``noop`` (nothing to run)."""
    chosen = settings.pxe_filter
    if chosen.driver == "dnsmasq":
        return DnsmasqHostsdir(chosen.dnsmasq_hostsdir, chosen.dnsmasq_pid_file)
    if chosen.driver in ("iptables", "nftables"):
        return NftablesFilter(chosen.nft_command, chosen.interface, table=chosen.table)
    return None


class FilterHost:
    """This host's filter, the change feed that wakes it and the DHCP service it guards.

    dnsmasq starts first: until the filter's first sync it answers nobody (its
    hosts directory is empty, or the firewall is closed), and the filter's
    start then tells it what it read. It stops last, after the filter has
    blocked the host.
    """

    def __init__(self, db: Database, pxe_filter: PxeFilter, dhcp: DhcpServer | None = None) -> None:
        self.filter = pxe_filter
        self.feed = ChangeFeed(db, pxe_filter.wake)
        self.dhcp = dhcp

    def start(self) -> None:
        if self.dhcp is not None:
            self.dhcp.start()
        try:
            self.feed.start()
            self.filter.start()
        except BaseException:  # a half-started host must not keep dnsmasq or threads running
            self.stop()
            raise

    def stop(self) -> None:
        try:
            self.feed.stop()
        finally:
            try:
                self.filter.stop()
            finally:
                if self.dhcp is not None:
                    self.dhcp.stop()


def build_filter_host(settings: Settings, db: Database) -> FilterHost | None:
    """The PXE filter this process runs, or None when the driver is ``noop``."""
    driver = build_driver(settings)
    if driver is None:
        return None
    chosen = settings.pxe_filter
    # Its own member name: a conductor of the same host releasing its roles must not
    # release the filter's.
    elector = SqlElector(db, f"{chosen.hostname}/pxe-filter", chosen.leader_lease)
    pxe_filter = PxeFilter(
        db,
        chosen,
        driver,
        elector,
        discovery=settings.conductor.inspection.discovery,
    )
    dhcp = DhcpServer(settings) if settings.dhcp.enabled else None
    return FilterHost(db, pxe_filter, dhcp)
