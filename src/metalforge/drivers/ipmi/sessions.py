"""Opening, closing and waiting on pyghmi sessions without tripping over its process-wide state.

Eight things in pyghmi 1.6 need care when sessions come and go in a
long-running, multi-threaded service:

* While a session logs in, pyghmi records it by (host, user, password, port,
  kg) so a concurrent login can join it. The record survives the login
  (it is deleted with ``bytes`` keys but stored with ``str`` ones), and the
  next ``Command`` to the same BMC joins the finished login and waits
  forever. ``login`` deletes the record once it is finished.
* Every logged-in session gets a keepalive, sent by whichever thread next
  waits for any IPMI answer. A keepalive to a BMC that went away stalls that
  unrelated caller for pyghmi's full timeout. Sessions here are used in
  short bursts and closed after, so they get no keepalive.
* An idle session is dropped by the BMC after its own timeout (often 60 s),
  and BMCs have few session slots, so a session idle for longer than
  ``MAX_IDLE`` is closed rather than reused.
* A synchronous caller sleeps until pyghmi's I/O thread sees a packet or the
  earliest retry deadline of *any* session passes. When another thread
  handled the caller's last answer, nothing wakes it, and it sleeps up to a
  second or more (long enough to miss a short ``ipmi_timeout``). While calls
  are under way ``nudging`` wakes every waiter every ``NUDGE_INTERVAL`` so each
  looks at its own session again.
* Two module locks guard its session tables, and some paths take them in
  opposite orders (sending takes the keepalive lock then the waiting lock,
  timing out takes the waiting lock then, on a re-login, the keepalive one):
  two threads can deadlock every IPMI call of the process for good. Both
  names are bound here to one reentrant lock, which has no order to get wrong.
* pyghmi routes a BMC's answers by (BMC address, local socket) to one session,
  and a session that logs out removes whatever that key routes to. Two
  sessions to one BMC on one socket -- a new login after a try was given up,
  and the given-up try, which pyghmi ends seconds later -- take each
  other's answers, and the old one's logout leaves the new one deaf: every
  later call to that BMC went unanswered until the process gave up on it.
  Each new session here gets a socket no live session to its BMC uses.
* A new ``Command`` to a BMC joins the logged-in session pyghmi already has
  for the same credentials, even one a given-up try is still stuck in.
  ``retire`` marks such a session broken, so the next login is really new.
* A login that fails (a wrong password) is marked broken by its I/O thread,
  which logs the session out -- setting ``broken`` -- before it records the
  reason in ``errormsg``. The waiting login sees ``broken`` and reads
  ``errormsg`` in between: an ``AttributeError`` instead of "incorrect
  password", now and then. The reason is recorded first here.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from pyghmi.ipmi import command as pyghmi_command
from pyghmi.ipmi.private import session as pyghmi_session

MAX_IDLE = 10.0
"""Seconds an open session may sit unused before it is closed instead of reused."""

_PATCHED = ("KEEPALIVE_SESSIONS", "WAITING_SESSIONS", "iosockets", "util")
if not all(hasattr(pyghmi_session, name) for name in _PATCHED) or not all(
    hasattr(pyghmi_session.Session, name) for name in ("initting_sessions", "_mark_broken")
):
    # The workarounds below reach into pyghmi's internals; a pyghmi that moved
    # them must stop the service at start-up, not hang it later.
    raise ImportError(
        "this pyghmi's session internals differ from the 1.6 series the IPMI driver patches"
    )

_MARK_BROKEN = pyghmi_session.Session._mark_broken


def _mark_broken_reason_first(session: Any, error: Any = None) -> None:
    """pyghmi's ``_mark_broken``, with the reason recorded before ``broken`` is set."""
    session.errormsg = error
    _MARK_BROKEN(session, error)


pyghmi_session.Session._mark_broken = _mark_broken_reason_first


_TABLES_LOCK = threading.RLock()
pyghmi_session.KEEPALIVE_SESSIONS = _TABLES_LOCK
pyghmi_session.WAITING_SESSIONS = _TABLES_LOCK

NUDGE_INTERVAL = 0.05
"""Seconds between wake-ups of pyghmi's waiters while a call is under way."""

_RECORDS_LOCK = threading.Lock()


def forget_login(host: str, port: int, username: str, password: str, *, finished: bool) -> None:
    """Remove pyghmi's record of a login to the BMC (only a finished one, or any)."""
    key = (host, username, password, port, None)
    with _RECORDS_LOCK:
        entry = pyghmi_session.Session.initting_sessions.get(key)
        if entry is None or (finished and getattr(entry, "logging", False)):
            return
        del pyghmi_session.Session.initting_sessions[key]
    if not finished:  # a login given up on: no later login may join it
        _retire_session(entry)


_SESSION_INIT = pyghmi_session.Session.__init__
_LIVE: dict[tuple[str, int], weakref.WeakSet[Any]] = {}
"""Sessions created to each BMC (host, port) that are still referenced somewhere."""
_LIVE_LOCK = threading.Lock()


def _init_on_a_socket_of_its_own(
    session: Any, bmc: str, userid: Any, password: Any, port: int = 623, *args: Any, **kw: Any
) -> None:
    """pyghmi's ``Session.__init__``; a new session avoids the sockets of its BMC's others."""
    if not hasattr(session, "initialized"):  # not an existing session pyghmi handed back
        with _LIVE_LOCK:
            peers = _LIVE.setdefault((bmc, port), weakref.WeakSet())
            taken = [peer.socket for peer in list(peers) if getattr(peer, "socket", None)]
            session.forbidsock = [*getattr(session, "forbidsock", []), *taken]
            peers.add(session)
    _SESSION_INIT(session, bmc, userid, password, port, *args, **kw)


pyghmi_session.Session.__init__ = _init_on_a_socket_of_its_own


def retire(command: Any) -> None:
    """Make pyghmi stop handing out a session that failed or was given up on.

    It is marked broken, so no new ``Command`` joins it; whatever thread is
    still inside it goes on until pyghmi's own timeout ends it, on its own
    socket, where it takes no other session's answers.
    """
    session = getattr(command, "ipmi_session", None)
    if session is not None:
        _retire_session(session)


def _retire_session(session: Any) -> None:
    _without_keepalive(session)
    with pyghmi_session.util.protect(pyghmi_session.WAITING_SESSIONS):
        if not session.broken:
            session.broken = True  # what pyghmi's logout does, less the network and the routes
            if session.socket is not None:
                pyghmi_session.Session.socketpool[session.socket] -= 1


def _without_keepalive(session: Any) -> None:
    session.autokeepalive = False  # pyghmi closes, rather than keeps alive, an idle session
    with pyghmi_session.util.protect(pyghmi_session.KEEPALIVE_SESSIONS):
        pyghmi_session.Session.keepalive_sessions.pop(session, None)


def login(host: str, port: int, username: str, password: str) -> Any:
    """A new logged-in pyghmi ``Command``; raises pyghmi's exceptions."""
    try:
        command = pyghmi_command.Command(bmc=host, userid=username, password=password, port=port)
    finally:
        forget_login(host, port, username, password, finished=True)
    _without_keepalive(command.ipmi_session)
    return command


def logout(command: Any) -> None:
    """Close the session, ignoring a BMC that no longer answers (it was going away anyway)."""
    with contextlib.suppress(Exception):
        command.ipmi_session.logout()
    _without_keepalive(command.ipmi_session)


def _wake_waiters() -> None:
    """What pyghmi itself does to interrupt its I/O thread: a one-byte packet to itself."""
    sockets, myself = pyghmi_session.iosockets, pyghmi_session.myself
    if sockets and myself is not None:
        with contextlib.suppress(OSError):
            sockets[0].sendto(b"\x01", (myself, sockets[0].getsockname()[1]))


class _Nudger:
    """A thread that wakes pyghmi's waiters periodically while any call is active."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with self._cond:
            self._active += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ipmi-nudge", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._active > 0)
            _wake_waiters()
            time.sleep(NUDGE_INTERVAL)


nudging = _Nudger().active
"""``with nudging():`` around pyghmi calls keeps their waiters from oversleeping."""
