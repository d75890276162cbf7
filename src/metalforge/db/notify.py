"""Wake-ups across processes: PostgreSQL LISTEN/NOTIFY.

The work-item table is the truth and every conductor polls it every
``poll_interval`` anyway; a notification only cuts the wait between an API
process queueing work and a conductor process claiming it. So nothing here
may fail a request or stop a conductor: errors are logged, the listener
reconnects, and the poll covers whatever was missed meanwhile.

The API calls a ``Notifier`` after its transaction committed (a NOTIFY sent
before would wake conductors to a queue that does not show the item yet).
Each conductor runs one ``Listener`` thread on its own connection, outside
the pool, because a LISTENing connection must stay open and idle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.engine import make_url

from metalforge.db.engine import Database

LOG = logging.getLogger(__name__)

CHANNEL = "metalforge_work"
"""The channel the API notifies after queueing work and conductors listen on."""


def conninfo(url: str) -> str:
    """The libpq URI for a SQLAlchemy URL: the listener talks to psycopg, not SQLAlchemy."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Notifier:
    """``notify()`` callback for the API: sends one NOTIFY through the process's pool."""

    def __init__(self, db: Database, channel: str = CHANNEL) -> None:
        self._db = db
        self._channel = channel

    def __call__(self) -> None:
        try:
            with self._db.write_engine.connect() as connection:
                connection.execute(
                    text("SELECT pg_notify(:channel, '')"), {"channel": self._channel}
                )
                connection.commit()
        except Exception:  # no failure may fail a request already committed
            # The item is committed; conductors find it at their next poll.
            LOG.warning("could not notify the conductors (they will poll)", exc_info=True)


class Listener:
    """A daemon thread LISTENing on ``channel``; calls ``on_notify`` for every wake-up.

    It also calls ``on_notify`` right after each (re)connection, since work may
    have been queued while nobody listened.
    """

    def __init__(
        self,
        url: str,
        on_notify: Callable[[], None],
        *,
        channel: str = CHANNEL,
        check_interval: float = 0.5,
        retry_delay: float = 1.0,
    ) -> None:
        self._conninfo = conninfo(url)
        self._on_notify = on_notify
        self._channel = channel
        self._check_interval = check_interval
        self._retry_delay = retry_delay
        self._stopping = threading.Event()
        self.listening = threading.Event()
        """Set while a connection is LISTENing (tests wait for it)."""
        self._thread = threading.Thread(target=self._run, name="notify-listener", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._listen()
            except Exception:  # the listener thread outlives any failure
                LOG.warning(
                    "LISTEN %s failed; retrying in %.1fs (polling meanwhile)",
                    self._channel,
                    self._retry_delay,
                    exc_info=True,
                )
            finally:
                self.listening.clear()
            self._stopping.wait(self._retry_delay)

    def _listen(self) -> None:
        with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5) as connection:
            connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
            self.listening.set()
            LOG.info("listening for work on channel %s", self._channel)
            self._on_notify()
            while not self._stopping.is_set():
                # Returns after ``check_interval`` without notifications, to see ``stop``.
                for _ in connection.notifies(timeout=self._check_interval):
                    self._on_notify()
