"""The firewall driver (``iptables``/``nftables``): nftables sets on the DHCP port.

One table of family ``inet`` that the driver owns, built as the HA design
asks: DHCP requests arriving on the provisioning interface go through an
allow chain (the ``allow`` set: accept), then a deny chain (the ``deny``
set: drop), which ends with the *pass* rule (``udp dport @pass accept``,
for machines nobody knows, with discovery on) and a final drop. Every host
keeps its ``deny`` set current, so a host that becomes leader has only the
``allow`` and ``pass`` entries to add.

Those leader-only entries are written with a timeout that ends one
election round before the leader's lease (counted from the campaign that
renewed it), refreshed every round: if the leader's process dies or hangs,
its host's kernel drops them by itself before another host may take the
role.

MAC sets are ``ether_addr`` sets (hash sets: a lookup costs the same with
ten thousand entries), and every change is one ``nft -f -`` transaction, so
thousands of entries change in one atomic step. ipset's ``hash:mac`` would
do the same for iptables, but many kernels lack it; nftables does not.
"""

from __future__ import annotations

import logging
import math
import subprocess
from collections.abc import Iterable, Sequence

from metalforge.pxe_filter.desired import BLOCK_ALL, FilterState
from metalforge.pxe_filter.driver import FilterDriver, FilterError

LOG = logging.getLogger(__name__)

DHCP_SERVER_PORT = 67


def _elements(values: Iterable[str], timeout: str = "") -> str:
    suffix = f" timeout {timeout}" if timeout else ""
    return ", ".join(f"{value}{suffix}" for value in sorted(values))


class NftablesFilter(FilterDriver):
    """The sets and chains of ``table`` on ``interface``, changed through ``command``."""

    name = "nftables"

    def __init__(
        self,
        command: Sequence[str],
        interface: str,
        *,
        table: str = "metalforge_pxe",
        call_timeout: float = 30.0,
    ) -> None:
        self.command = list(command)
        self.interface = interface
        self.table = table
        self.call_timeout = call_timeout
        self._denied: frozenset[str] | None = None
        """The ``deny`` set as last written (None: rebuild the whole table)."""

    def start(self) -> None:
        self._denied = None
        self._rebuild(BLOCK_ALL, "")

    def apply(self, state: FilterState, *, repair: bool, valid_for: float) -> None:
        # Whole milliseconds, rounded down: an entry never outlives the leader's lease.
        timeout = f"{math.floor(valid_for * 1000)}ms"
        if repair or self._denied is None:
            self._rebuild(state, timeout)
            return
        lines = [f"flush set inet {self.table} allow", f"flush set inet {self.table} pass"]
        lines += self._leader_entries(state, timeout)
        if state.denied != self._denied:
            lines.append(f"flush set inet {self.table} deny")
            lines += self._add("deny", state.denied)
        self._run(lines)
        self._denied = state.denied

    def block(self) -> None:
        try:
            self._run([f"flush set inet {self.table} allow", f"flush set inet {self.table} pass"])
        except FilterError:
            # The table is gone or broken: build it again, blocking.
            self._denied = None
            self._rebuild(BLOCK_ALL, "")

    def _rebuild(self, state: FilterState, timeout: str) -> None:
        """The whole table in one transaction (what was there before is replaced)."""
        t = self.table
        lines = [
            f"add table inet {t}",
            f"delete table inet {t}",
            f"add table inet {t}",
            f"add set inet {t} allow {{ type ether_addr; flags timeout; }}",
            f"add set inet {t} deny {{ type ether_addr; }}",
            f"add set inet {t} pass {{ type inet_service; flags timeout; }}",
            f"add chain inet {t} input "
            "{ type filter hook input priority filter; policy accept; }",
            f"add chain inet {t} allowlist",
            f"add chain inet {t} denylist",
            f'add rule inet {t} input iifname "{self.interface}" udp dport '
            f"{DHCP_SERVER_PORT} jump allowlist",
            f"add rule inet {t} allowlist ether saddr @allow accept",
            f"add rule inet {t} allowlist jump denylist",
            f"add rule inet {t} denylist ether saddr @deny drop",
            f"add rule inet {t} denylist udp dport @pass accept",
            f"add rule inet {t} denylist drop",
        ]
        lines += self._add("deny", state.denied)
        lines += self._leader_entries(state, timeout)
        self._run(lines)
        self._denied = state.denied

    def _leader_entries(self, state: FilterState, timeout: str) -> list[str]:
        lines = self._add("allow", state.allowed, timeout)
        if state.unknown_allowed:
            lines += self._add("pass", [str(DHCP_SERVER_PORT)], timeout)
        return lines

    def _add(self, name: str, values: Iterable[str], timeout: str = "") -> list[str]:
        listed = _elements(values, timeout)
        return [f"add element inet {self.table} {name} {{ {listed} }}"] if listed else []

    def _run(self, lines: list[str]) -> None:
        script = "\n".join(lines) + "\n"
        try:
            done = subprocess.run(
                [*self.command, "-f", "-"],
                input=script.encode(),
                capture_output=True,
                timeout=self.call_timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FilterError(f"cannot run {' '.join(self.command)}: {exc}") from exc
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip().splitlines()
            raise FilterError(
                f"nft refused the change (exit {done.returncode}): "
                + (message[0] if message else "no message")
            )
