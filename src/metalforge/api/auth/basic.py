"""HTTP Basic authentication against an Apache htpasswd file with bcrypt entries.

The file format is Apache's (``htpasswd -B``): one ``user:hash`` per line, as
Ironic's ``http_basic`` strategy reads it. Only bcrypt hashes are accepted:
the older htpasswd formats (crypt, MD5, SHA-1) are too cheap to brute-force,
so a file holding one is refused when it is loaded rather than half used.

A wrong user costs what a wrong password costs: an unknown user is checked
against a bcrypt hash of the file's usual cost, so the time taken does not
tell which user names exist. A verified (user, password) pair is remembered
for a short while as a keyed hash, because a bcrypt check costs a quarter of
a second of CPU and clients poll.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import bcrypt

LOG = logging.getLogger(__name__)
_BCRYPT_PREFIXES = ("$2y$", "$2b$", "$2a$")


class UserFileError(ValueError):
    """The htpasswd file cannot be used: missing, unreadable, or a non-bcrypt entry."""


@dataclass(frozen=True)
class UserFile:
    """The parsed htpasswd file, and what to compare unknown users against."""

    hashes: dict[str, bytes]
    decoy: bytes
    mtime_ns: int


def parse_user_file(path: Path) -> UserFile:
    """Read ``path``; every entry must be ``user:bcrypt-hash``."""
    try:
        stat = path.stat()
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserFileError(f"cannot read the http_basic user file {path}: {exc.strerror}") from exc
    hashes: dict[str, bytes] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, digest = line.partition(":")
        if not sep or not user:
            raise UserFileError(f"{path} line {number} is not of the form user:hash")
        if not digest.startswith(_BCRYPT_PREFIXES):
            raise UserFileError(
                f"{path} line {number} (user {user}) is not a bcrypt hash; "
                "create entries with `htpasswd -B`"
            )
        hashes[user] = digest.encode()
    return UserFile(hashes=hashes, decoy=_decoy(hashes.values()), mtime_ns=stat.st_mtime_ns)


def _decoy(hashes: Iterable[bytes]) -> bytes:
    """A bcrypt hash of a random password at the most common cost of ``hashes``."""
    costs = Counter(int(h[4:6]) for h in hashes if h[4:6].isdigit())
    cost = costs.most_common(1)[0][0] if costs else 12
    return bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=max(4, min(cost, 31))))


def parse_basic_header(value: str) -> tuple[str, str] | None:
    """``(user, password)`` from an ``Authorization: Basic`` value, or none if malformed."""
    scheme, _, encoded = value.strip().partition(" ")
    if scheme.lower() != "basic" or not encoded:
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    if not sep or not user:
        return None
    return user, password


class HtpasswdVerifier:
    """Checks user names and passwords against the file, re-read whenever it changes."""

    def __init__(
        self,
        path: Path,
        *,
        cache_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._file = parse_user_file(path)
        self._key = os.urandom(32)
        self._verified: dict[bytes, float] = {}
        self._rejected_mtime: int | None = None

    def _current(self) -> UserFile:
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            mtime = -1
        with self._lock:
            if mtime == -1:
                # A removed file removes every user: failing closed is what
                # an operator who deletes it means.
                if self._file.hashes:
                    LOG.error("%s is gone: every http_basic login is refused", self.path)
                    self._file = UserFile(hashes={}, decoy=self._file.decoy, mtime_ns=-1)
                    self._verified.clear()
                return self._file
            if mtime not in (self._file.mtime_ns, self._rejected_mtime):
                self._verified.clear()
                try:
                    self._file = parse_user_file(self.path)
                except UserFileError as exc:
                    # Keep serving the last good file: a half-written edit must
                    # not lock every operator out (nor let anyone in).
                    self._rejected_mtime = mtime
                    LOG.error("%s; the previous version stays in force", exc)
            return self._file

    def verify(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s. Blocks for a bcrypt check: call from a thread."""
        current = self._current()
        stored = current.hashes.get(user)
        fingerprint = hmac.new(
            self._key,
            b"\0".join((user.encode(), password.encode(), stored or current.decoy)),
            hashlib.sha256,
        ).digest()
        now = self._clock()
        if stored is not None and self.cache_seconds > 0:
            with self._lock:
                expires = self._verified.get(fingerprint)
            if expires is not None and expires > now:
                return True
        try:
            matched = bcrypt.checkpw(password.encode(), stored or current.decoy)
        except ValueError:
            matched = False
        if stored is None or not matched:
            return False
        if self.cache_seconds > 0:
            with self._lock:
                if len(self._verified) > 10_000:
                    self._verified = {k: v for k, v in self._verified.items() if v > now}
                self._verified[fingerprint] = now + self.cache_seconds
        return True
