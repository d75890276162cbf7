"""What counts as a secret, and how it is hidden wherever a value could be shown.

Secrets reach metalforge in free-form documents (a node's ``driver_info``
holds BMC passwords, ``instance_info`` a config drive and image URLs that may
carry credentials) and in settings (the database URL). Every place that shows
such a value (API responses, history, ``last_error``, log lines, start-up
banners) goes through these functions, so the rule is written once.

A key is secret when its name says so: it ends in ``_password``, ``_key``,
``_secret`` or ``_token`` (or is one of those words), or contains one of the
words operators and drivers use for credentials (``password``, ``secret``,
``token``, ``passphrase``, ``private_key``). Matching is case-insensitive and
applies at every nesting level, so a password inside a nested object or a
list of objects is masked too.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "******"
_MARKERS = ("password", "passwd", "secret", "token", "passphrase", "private_key")
_SUFFIXES = ("_key",)
_WORDS = frozenset({"key", "pass"})


def is_secret_key(key: str) -> bool:
    """Whether a value stored under ``key`` must never be shown."""
    name = key.lower()
    return name in _WORDS or name.endswith(_SUFFIXES) or any(m in name for m in _MARKERS)


def mask_secrets(data: Any) -> Any:
    """A copy of ``data`` with the value of every secret key replaced by ``******``.

    Objects and lists are walked to any depth; empty values stay empty, so a
    client can still tell a password that is set from one that is not.
    """
    if isinstance(data, dict):
        return {
            key: MASK
            if value not in (None, "") and isinstance(key, str) and is_secret_key(key)
            else mask_secrets(value)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [mask_secrets(item) for item in data]
    return data


def _is_secret_parameter(name: str) -> bool:
    lowered = name.lower()
    return is_secret_key(name) or lowered.endswith(("sig", "signature", "credential"))


def mask_url(url: str) -> str:
    """``url`` with its credentials masked: a password in its user part, and query
    parameters that carry secrets (``temp_url_sig``, ``X-Amz-Signature``, ``token``...).
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return MASK
    netloc = parts.netloc
    if parts.password is not None:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{parts.username or ''}:{MASK}@{host}" + (f":{port}" if port else "")
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_is_secret_parameter(k) for k, _ in pairs):
            query = urlencode(
                [(k, MASK if _is_secret_parameter(k) else v) for k, v in pairs], safe="*"
            )
    if netloc == parts.netloc and query == parts.query:
        return url  # nothing secret (and ``sqlite:////path`` keeps its empty host)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_URL_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)([^/\s:@'\"]*)(:[^@\s/'\"]*)?@")


def mask_text_urls(text: str) -> str:
    """``text`` with the user part of every URL in it masked (``scheme://user:******@``).

    A user part without a password is masked whole: it is often a token.
    """

    def _mask(match: re.Match[str]) -> str:
        scheme, user, password = match.group(1), match.group(2), match.group(3)
        if password is None:
            return f"{scheme}{MASK}@"
        return f"{scheme}{user}:{MASK}@"

    return _URL_USERINFO.sub(_mask, text)


MAX_MESSAGE = 4096
"""Characters of a message kept when it is stored (``last_error``, history, a work
item's failure): what a BMC, an agent or a report says may be megabytes long."""


def bounded_text(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` storable and short: NULs and unencodable code points replaced (PostgreSQL
    takes neither), and cut at ``limit`` characters saying how much was left out."""
    clean = text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    if len(clean) <= limit:
        return clean
    return f"{clean[:limit]}... ({len(clean) - limit} more characters)"


class Scrubber:
    """Makes messages safe to store or show: the secrets of ``documents`` and URL
    credentials masked, and the message bounded (``bounded_text``).

    For messages built from what a driver, a BMC or an agent said about a
    node: they may quote a credential, a config drive or a signed URL. The
    documents are walked once, at the first message, however many follow.
    """

    def __init__(self, *documents: Any) -> None:
        self._documents = documents
        self._secrets: list[str] | None = None

    def __call__(self, text: str) -> str:
        if self._secrets is None:
            found = {
                value
                for document in self._documents
                for value in (*secret_values(document), *_url_secrets(document))
                if len(value) >= 3
            }
            self._secrets = sorted(found, key=len, reverse=True)
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        # Masked whole first, then cut: a cut could leave part of a secret unmasked.
        return bounded_text(mask_text_urls(text))


def scrub_message(text: str, *documents: Any) -> str:
    """``text`` with the secrets of ``documents`` and URL credentials masked (see ``Scrubber``)."""
    return Scrubber(*documents)(text)


def _url_secrets(data: Any) -> list[str]:
    """Passwords and signatures inside the URLs of ``data``, at any depth."""
    found: list[str] = []
    if isinstance(data, dict):
        for value in data.values():
            found.extend(_url_secrets(value))
    elif isinstance(data, list):
        for item in data:
            found.extend(_url_secrets(item))
    elif isinstance(data, str) and "://" in data:
        try:
            parts = urlsplit(data)
            if parts.password:
                found.append(parts.password)
            found.extend(v for k, v in parse_qsl(parts.query) if _is_secret_parameter(k))
        except ValueError:
            pass
    return found


def mask_document(data: Any) -> Any:
    """``mask_secrets`` plus the credentials of every URL, at any depth."""
    masked = mask_secrets(data)
    return _mask_urls(masked)


def _mask_urls(data: Any) -> Any:
    if isinstance(data, dict):
        return {key: _mask_urls(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_mask_urls(item) for item in data]
    if isinstance(data, str) and "://" in data:
        return mask_text_urls(mask_url(data))
    return data


def secret_values(data: Any) -> list[str]:
    """The string values stored under secret keys in ``data``, at any depth."""
    found: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and is_secret_key(key) and isinstance(value, str):
                found.append(value)
            else:
                found.extend(secret_values(value))
    elif isinstance(data, list):
        for item in data:
            found.extend(secret_values(item))
    return found
