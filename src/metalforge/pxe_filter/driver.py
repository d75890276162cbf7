"""What a PXE filter driver does: make this host's DHCP service obey a ``FilterState``."""

from __future__ import annotations

from abc import ABC, abstractmethod

from metalforge.pxe_filter.desired import FilterState


class FilterError(RuntimeError):
    """The host's filter could not be changed (the service then blocks and retries)."""


class FilterDriver(ABC):
    """One way of filtering; every method leaves the host in a state it can name."""

    name: str

    @abstractmethod
    def start(self) -> None:
        """Forget what an earlier run left and block everything."""

    @abstractmethod
    def apply(self, state: FilterState, *, repair: bool, valid_for: float) -> None:
        """Make the host filter as ``state`` says.

        Called again with the same state to refresh what expires; with
        ``repair`` the driver checks what is really in place rather than what it
        last wrote, and rewrites whatever differs. ``valid_for``: seconds the
        leader's own entries (what lets anyone through) may stay in force unless
        renewed; a driver that can make them expire does.
        """

    @abstractmethod
    def block(self) -> None:
        """Answer nobody, without the database (on error and at exit)."""

    def close(self) -> None:  # noqa: B027 - most drivers hold nothing to release
        """Release what ``start`` set up, after the final ``block`` at exit."""
