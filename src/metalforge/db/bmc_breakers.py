"""Which BMCs the processes refuse to call for now (their circuit breakers are open).

The guard (``drivers.bmc_guard``) lives in each process's memory; this table
is what it tells the cluster when a breaker opens or closes, so every API
process's ``GET /metrics`` shows the same. A write happens only when a
breaker changes, never per call, and in a thread of its own: the call that
tripped the breaker may be inside a transaction, and never waits for this
one. A process that dies with a breaker open leaves its row, which stops
counting once its ``open_until`` has passed.
"""

from __future__ import annotations

import datetime as dt
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from metalforge.db.engine import Database
from metalforge.db.models import BmcBreaker

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenBreaker:
    protocol: str
    address: str
    holder: str
    failures: int


@dataclass
class BreakerRecorder:
    """Writes one process's breaker changes (the guard's listener), one at a time."""

    db: Database
    holder: str
    _writer: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="bmc-breakers")
    )

    def opened(self, protocol: str, address: str, failures: int, cooldown: float) -> None:
        self._writer.submit(self._write_open, protocol, address, failures, cooldown)

    def closed(self, address: str) -> None:
        self._writer.submit(self._write_closed, address)

    def flush(self) -> None:
        """Wait until every change asked for so far is written (tests, a process's stop)."""
        self._writer.submit(lambda: None).result()

    def _write_open(self, protocol: str, address: str, failures: int, cooldown: float) -> None:
        try:
            with self.db.write() as session:
                until = self.db.now() + dt.timedelta(seconds=cooldown)
                row = session.get(BmcBreaker, (address, self.holder))
                if row is None:
                    row = BmcBreaker(address=address, holder=self.holder)
                    session.add(row)
                row.protocol, row.failures, row.open_until = protocol, failures, until
        except SQLAlchemyError:
            LOG.warning("could not record the open breaker of BMC %s", address, exc_info=True)

    def _write_closed(self, address: str) -> None:
        try:
            with self.db.write() as session:
                session.execute(
                    delete(BmcBreaker).where(
                        BmcBreaker.address == address, BmcBreaker.holder == self.holder
                    )
                )
        except SQLAlchemyError:
            LOG.warning("could not record the closed breaker of BMC %s", address, exc_info=True)


def open_now(session: Session, now: dt.datetime) -> list[OpenBreaker]:
    """The breakers open at ``now``, by address."""
    rows = session.scalars(
        select(BmcBreaker).where(BmcBreaker.open_until > now).order_by(BmcBreaker.address)
    )
    return [OpenBreaker(r.protocol, r.address, r.holder, r.failures) for r in rows]
