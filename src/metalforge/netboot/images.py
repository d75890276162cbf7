"""The deploy kernel and ramdisk nodes boot: fetched once, checked, cached, served.

A node's ``driver_info.deploy_kernel`` and ``deploy_ramdisk`` name where the
agent's kernel and initramfs come from: an http(s) URL, or a file in one of
the directories ``netboot.image_dirs`` allows (a user who may set driver_info
must not be able to have the host's other files served to the network).
Each is fetched once into this host's cache, refused unless it looks like
what it claims to be (a kernel, an initramfs: an error page saved under
the right name would otherwise boot nothing, much later), and stored under
its SHA-256, which is also the name it is served by.

The cache is bounded (``netboot.image_cache_max_size``): past it the least
recently used images are deleted, except those a node pins while it uses
them (its ramdisk's boot images, a virtual drive's copy) and those used in
the last ``image_cache_min_age`` seconds; an image deleted and needed again
is fetched or built again.

The cache is per host: the conductor fetches when it prepares a node's boot
(so a bad image fails the flow at once, with a reason), and a separate API
process fetches what it is asked to serve. Writes are atomic (a temporary
file renamed into place), so processes sharing a cache never see half an
image.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import ipaddress
import json
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import requests
from urllib3 import exceptions as urllib3_errors

from metalforge import outbound_http
from metalforge.config import NetbootSettings
from metalforge.redaction import mask_url

LOG = logging.getLogger(__name__)

CHUNK = 1024 * 1024
FETCH_DEADLINE = "netboot.image_fetch_deadline"


class ImageKind(Enum):
    KERNEL = "kernel"
    RAMDISK = "ramdisk"
    OPTICAL = "virtual CD image"
    """An image an operator attaches to a virtual CD drive: ISO 9660 or UDF."""
    DISK = "virtual disk image"
    """An image attached to a virtual disk or floppy: a partitioned disk (MBR, GPT, a
    hybrid ISO), a FAT floppy, or an ISO 9660 image (BMCs take those as USB sticks)."""

    @classmethod
    def for_device(cls, device_type: str) -> ImageKind:
        """What an image attached to ``device_type`` (``cdrom``, ``disk``, ``floppy``) is."""
        return cls.OPTICAL if device_type == "cdrom" else cls.DISK


class ImageError(Exception):
    """The image cannot be had: its source is refused, out of reach, or not what it claims."""


@dataclass(frozen=True)
class CachedImage:
    """One image in the cache."""

    digest: str
    """SHA-256 of the content, hex: the name it is stored and served under."""
    size: int
    path: Path


_RAMDISK_MAGIC = (
    b"\x1f\x8b",  # gzip
    b"\xfd7zXZ\x00",  # xz
    b"\x28\xb5\x2f\xfd",  # zstd
    b"\x02\x21\x4c\x18",  # lz4 (legacy frame, as the kernel reads it)
    b"\x04\x22\x4d\x18",  # lz4 frame
    b"BZh",  # bzip2
    b"\x5d\x00\x00",  # lzma
    b"070701",  # cpio (newc), uncompressed or after early microcode
    b"070702",  # cpio (crc)
)


HEAD_SIZE = 0x8800
"""Bytes of an image read to tell what it is: up to the first volume descriptor of an ISO."""

_VOLUME_DESCRIPTOR = 0x8001
"""Where an ISO 9660 (``CD001``) or UDF (``BEA01``, ``NSR0x``) volume names its standard."""
_OPTICAL_MAGIC = (b"CD001", b"BEA01", b"NSR02", b"NSR03")


def _is_optical(head: bytes) -> bool:
    return head[_VOLUME_DESCRIPTOR : _VOLUME_DESCRIPTOR + 5] in _OPTICAL_MAGIC


def _is_disk(head: bytes) -> bool:
    """A boot sector's signature (MBR, a FAT floppy, a hybrid ISO) or a GPT header."""
    return head[510:512] == b"\x55\xaa" or head[512:520] == b"EFI PART" or _is_optical(head)


def looks_like(kind: ImageKind, head: bytes) -> bool:
    """Whether the first ``HEAD_SIZE`` bytes of an image are those of a ``kind``.

    A kernel is an x86 bzImage (``HdrS`` at 0x202), an arm64 ``Image``
    (``ARM\\x64`` at 0x38) or an EFI executable (``MZ``); a ramdisk is a cpio
    archive, compressed with anything the kernel unpacks; virtual media are
    checked by the drive they go into (``ImageKind.OPTICAL``, ``DISK``), so a
    tenant cannot have metalforge fetch and republish any bytes it likes.
    """
    if kind is ImageKind.KERNEL:
        return head[0x202:0x206] == b"HdrS" or head[0x38:0x3C] == b"ARM\x64" or head[:2] == b"MZ"
    if kind is ImageKind.OPTICAL:
        return _is_optical(head)
    if kind is ImageKind.DISK:
        return _is_disk(head)
    return head.startswith(_RAMDISK_MAGIC)


def _describe(head: bytes) -> str:
    """What an image that is not one is instead, for the operator: its kind, never its bytes
    (an error that quoted them would let whoever reads ``last_error`` read the start of a
    local file or of a page on a network only metalforge reaches)."""
    if not head:
        return "nothing (it is empty)"
    sample = head[:512]
    if b"<html" in sample.lower() or sample.lstrip().startswith(b"<!"):
        return "an HTML page"
    for kind, name in (
        (ImageKind.KERNEL, "a kernel"),
        (ImageKind.RAMDISK, "a compressed archive or initramfs"),
        (ImageKind.OPTICAL, "a CD image"),
        (ImageKind.DISK, "a disk image"),
    ):
        if looks_like(kind, head):
            return name
    if all(32 <= b < 127 or b in (9, 10, 13) for b in sample):
        return "text"
    return "binary data of no known image kind"


class ImageCache:
    """The images this host has fetched, in ``root`` (``blobs/`` and ``sources/``)."""

    def __init__(
        self,
        root: Path,
        *,
        allowed_dirs: tuple[Path, ...] = (),
        max_size: int,
        timeout: float,
        pace: FetchPace | None = None,
        peers: outbound_http.PeerPolicy | None = None,
        bounds: CacheBounds | None = None,
        retry_after: float = 30.0,
    ) -> None:
        """``timeout``: seconds a server may stay silent; ``pace``: how long a whole
        download may take, and how slow it may be; ``peers``: the addresses a download
        may reach (default: none that ``NEVER_BY_DEFAULT`` lists); ``retry_after``: seconds
        before a failed background fetch (``prefetch``) of a source is tried again."""
        self.root = root
        self.allowed_dirs = tuple(d.resolve() for d in allowed_dirs)
        self.max_size = max_size
        self.timeout = timeout
        self.pace = pace or FetchPace()
        self.peers = peers or outbound_http.PeerPolicy(outbound_http.NEVER_BY_DEFAULT)
        self.bounds = bounds or CacheBounds()
        self._evicting = threading.Lock()
        self.retry_after = retry_after
        self._session = outbound_http.session()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._fetching: set[str] = set()
        self._failures: dict[str, tuple[float, str]] = {}

    # --- reading what is there ---

    def blob(self, digest: str) -> CachedImage | None:
        """The image stored under ``digest``, if this host has it."""
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            return None
        path = self.root / "blobs" / digest
        try:
            size = path.stat().st_size
        except OSError:
            return None
        return CachedImage(digest, size, path)

    def used(self, image: CachedImage) -> None:
        """Mark ``image`` as just used: eviction takes the least recently used first."""
        with contextlib.suppress(OSError):
            os.utime(image.path)

    # --- what nodes use, and eviction ---

    def _pin_path(self, holder: str, purpose: str) -> Path:
        name = hashlib.sha256(f"{holder}\0{purpose}".encode()).hexdigest()
        return self.root / "pins" / f"{name}.json"

    def pin(self, holder: str, purpose: str, images: Iterable[CachedImage]) -> None:
        """Keep ``images`` while ``holder`` (a node) uses them for ``purpose`` (its ramdisk's
        boot, a virtual drive): eviction never takes them, until ``unpin`` or until the pin
        is older than ``CacheBounds.pin_days`` (a node deleted meanwhile holds nothing)."""
        entry = {"holder": holder, "purpose": purpose, "digests": [i.digest for i in images]}
        _write_atomically(self._pin_path(holder, purpose), json.dumps(entry).encode())

    def unpin(self, holder: str, purpose: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._pin_path(holder, purpose))

    def pinned(self) -> set[str]:
        """The digests some holder's live pin keeps."""
        kept: set[str] = set()
        expiry = time.time() - self.bounds.pin_days * 86400
        for path in (self.root / "pins").glob("*.json"):
            try:
                if path.stat().st_mtime < expiry:
                    continue
                kept.update(str(d) for d in json.loads(path.read_text())["digests"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being replaced, or not ours: it keeps nothing
        return kept

    def evict(self) -> int:
        """Delete least recently used images until the cache fits ``CacheBounds.max_size``:
        never a pinned one, nor one used in the last ``CacheBounds.min_age`` seconds (a boot
        under way that has not pinned yet). How many bytes went."""
        if not self._evicting.acquire(blocking=False):
            return 0  # another thread of this process is at it
        try:
            return self._evict()
        finally:
            self._evicting.release()

    def _evict(self) -> int:
        blobs: list[tuple[float, int, Path]] = []
        for path in (self.root / "blobs").glob("*"):
            if path.name.startswith("."):
                continue  # a fetch or build under way
            try:
                stat = path.stat()
            except OSError:
                continue
            blobs.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in blobs)
        if total <= self.bounds.max_size:
            return 0
        keep = self.pinned()
        young = time.time() - self.bounds.min_age
        freed = 0
        for mtime, size, path in sorted(blobs):
            if total - freed <= self.bounds.max_size:
                break
            if path.name in keep or mtime > young:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                freed += size
                LOG.info("evicted image %s (%d bytes) from the image cache", path.name, size)
        if total - freed > self.bounds.max_size:
            LOG.warning(
                "the image cache holds %d bytes, over netboot.image_cache_max_size (%d): "
                "what is left is pinned by nodes or in use",
                total - freed,
                self.bounds.max_size,
            )
        return freed

    def cached(self, source: str) -> CachedImage | None:
        """What ``source`` was fetched as, if it was (and its content is still here)."""
        try:
            entry = json.loads(self._entry_path(source).read_text())
            digest = str(entry["digest"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return self.blob(digest)

    def derived(self, key: str, build: Callable[[Path], None]) -> CachedImage:
        """The image made from others under ``key`` (a digest of its inputs), built by
        ``build(path)`` unless it was; stored and served by its own digest like the rest.

        Concurrent callers for one key wait for one build; a failed build leaves nothing.
        """
        found = self._derived_entry(key)
        if found is not None:
            self.used(found)
            return found
        with self._lock_for(f"derived:{key}"):
            found = self._derived_entry(key)
            if found is not None:
                return found
            blobs = self.root / "blobs"
            blobs.mkdir(parents=True, exist_ok=True, mode=0o755)
            temporary = blobs / f".building-{key}"
            try:
                build(temporary)
                digest, size = _digest_of(temporary)
                os.chmod(temporary, 0o644)
                final = blobs / digest
                os.replace(temporary, final)
            except BaseException:  # re-raised: a half-built image never stays
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
            image = CachedImage(digest, size, final)
            _write_atomically(self._derived_path(key), json.dumps({"digest": digest}).encode())
            LOG.info("built image %s: %d bytes, sha256 %s", key, size, digest)
        self.evict()
        return image

    def _derived_path(self, key: str) -> Path:
        return self.root / "derived" / f"{hashlib.sha256(key.encode()).hexdigest()}.json"

    def _derived_entry(self, key: str) -> CachedImage | None:
        try:
            digest = str(json.loads(self._derived_path(key).read_text())["digest"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return self.blob(digest)

    # --- fetching ---

    def check_source(self, source: str) -> None:
        """Refuse, without fetching, a source that can never be fetched (``ImageError``)."""
        check_source(source, self.allowed_dirs)

    def fetch(self, source: str, kind: ImageKind) -> CachedImage:
        """``source`` as a cached image: fetched now unless it already was (``ImageError``).

        Concurrent callers for one source wait for one fetch.
        """
        found = self.cached(source)
        if found is not None:
            self.used(found)
            return _checked(found, kind, source)
        with self._lock_for(source):
            found = self.cached(source)
            if found is not None:
                self.used(found)
                return _checked(found, kind, source)
            self.check_source(source)
            image = self._store(source, kind)
            self._remember(source, image)
        self.evict()
        return image

    def prefetch(self, source: str, kind: ImageKind) -> str | None:
        """Fetch ``source`` in a thread of its own unless that is under way or failed less
        than ``retry_after`` seconds ago; the reason of that failure, if any.

        For a server that must answer at once (a node's iPXE waits for its
        script): the node asks again, and finds the image once it is here.
        """
        if self.cached(source) is not None:
            return None
        with self._locks_lock:
            if source in self._fetching:
                return None
            failed = self._failures.get(source)
            if failed is not None and time.monotonic() - failed[0] < self.retry_after:
                return failed[1]
            self._fetching.add(source)
        threading.Thread(
            target=self._fetch_for_later, args=(source, kind), name="image-fetch", daemon=True
        ).start()
        return None if failed is None else failed[1]

    def _fetch_for_later(self, source: str, kind: ImageKind) -> None:
        try:
            self.fetch(source, kind)
        except ImageError as exc:
            LOG.warning("deploy image not fetched: %s", exc)
            failure: tuple[float, str] | None = (time.monotonic(), str(exc))
        except Exception as exc:  # a thread of its own: its failure is kept and logged
            LOG.exception("fetching deploy image %s failed", _shown(source))
            failure = (time.monotonic(), f"{type(exc).__name__} while fetching {_shown(source)}")
        else:
            failure = None
        with self._locks_lock:
            self._fetching.discard(source)
            if failure is None:
                self._failures.pop(source, None)
            else:
                self._failures[source] = failure

    def _lock_for(self, source: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(source, threading.Lock())

    def _entry_path(self, source: str) -> Path:
        return self.root / "sources" / (hashlib.sha256(source.encode()).hexdigest() + ".json")

    def _remember(self, source: str, image: CachedImage) -> None:
        entry = {
            "digest": image.digest,
            "size": image.size,
            "fetched_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        _write_atomically(self._entry_path(source), json.dumps(entry).encode())

    def _file_of(self, source: str) -> Path:
        return _allowed_file(source, self.allowed_dirs)

    def _store(self, source: str, kind: ImageKind) -> CachedImage:
        blobs = self.root / "blobs"
        blobs.mkdir(parents=True, exist_ok=True, mode=0o755)
        fd, temporary = tempfile.mkstemp(dir=blobs, prefix=".fetching-")
        try:
            with os.fdopen(fd, "wb") as out:
                digest, size = self._copy(source, kind, out)
            os.chmod(temporary, 0o644)
            final = blobs / digest
            os.replace(temporary, final)
        except BaseException:  # re-raised: a half-fetched image never stays
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        LOG.info("fetched %s %s: %d bytes, sha256 %s", kind.value, _shown(source), size, digest)
        return CachedImage(digest, size, final)

    def _copy(self, source: str, kind: ImageKind, out: BinaryIO) -> tuple[str, int]:
        writer = _Writer(out, kind, self.max_size, source)
        if _is_file(source):
            with self._file_of(source).open("rb") as src:
                while chunk := src.read(CHUNK):
                    writer.add(chunk)
        else:
            self._download(source, kind, writer)
        return writer.finish()

    def _download(self, source: str, kind: ImageKind, writer: _Writer) -> None:
        """Stream ``source`` into ``writer`` within the pace's deadline and minimum rate.

        ``read1`` hands over whatever has arrived, so a trickle is measured as it
        comes instead of blocking until a whole chunk is in.
        """
        pace = self.pace
        began = time.monotonic()
        with (
            outbound_http.reaching(self.peers),
            outbound_http.within(pace.deadline, FETCH_DEADLINE) as deadline,
        ):
            try:
                with self._session.get(source, stream=True, timeout=self.timeout) as response:
                    if response.status_code != 200:
                        raise ImageError(
                            f"{kind.value} {_shown(source)}: the server answered "
                            f"{response.status_code}"
                        )
                    while chunk := response.raw.read1(CHUNK, decode_content=True):
                        writer.add(chunk)
                        pace.check(writer.size, time.monotonic() - began, kind, source)
            except (requests.RequestException, urllib3_errors.HTTPError, OSError) as exc:
                refused = outbound_http.refusal()
                if refused is not None:
                    raise ImageError(
                        f"{kind.value} {_shown(source)} may not be fetched: {refused} "
                        "(netboot.fetch_allowed_networks)"
                    ) from None
                if deadline.expired:
                    raise ImageError(
                        f"{kind.value} {_shown(source)} was not fetched within "
                        f"{pace.deadline:g} s ({FETCH_DEADLINE}); cut off"
                    ) from None
                raise ImageError(
                    f"{kind.value} {_shown(source)} could not be fetched: {type(exc).__name__}"
                ) from None


@dataclass(frozen=True)
class CacheBounds:
    """How large the cache may grow (``netboot.image_cache_*`` settings)."""

    max_size: int = 20 * 1024**3
    min_age: float = 600.0
    pin_days: float = 30.0


@dataclass(frozen=True)
class FetchPace:
    """How long a download may take, and how slowly it may come (``netboot`` settings)."""

    deadline: float = 1800.0
    min_rate: int = 65536
    grace: float = 30.0

    def check(self, size: int, elapsed: float, kind: ImageKind, source: str) -> None:
        """Give the download up (``ImageError``) when, past the grace, it is too slow."""
        if self.min_rate and elapsed > self.grace and size < self.min_rate * elapsed:
            raise ImageError(
                f"{kind.value} {_shown(source)} came too slowly: {size} bytes in "
                f"{elapsed:.0f} s, under netboot.image_fetch_min_rate ({self.min_rate} bytes/s)"
            )


class _Writer:
    """Counts, hashes and checks an image as it is written."""

    def __init__(self, out: BinaryIO, kind: ImageKind, max_size: int, source: str) -> None:
        self.out = out
        self.kind = kind
        self.max_size = max_size
        self.source = source
        self.hash = hashlib.sha256()
        self.size = 0
        self.head = b""

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_size:
            raise ImageError(
                f"{self.kind.value} {_shown(self.source)} is larger than netboot.max_image_size "
                f"({self.max_size} bytes)"
            )
        if len(self.head) < HEAD_SIZE:
            self.head += chunk[: HEAD_SIZE - len(self.head)]
        self.hash.update(chunk)
        self.out.write(chunk)

    def finish(self) -> tuple[str, int]:
        if not looks_like(self.kind, self.head):
            raise ImageError(
                f"{self.kind.value} {_shown(self.source)} is not a {self.kind.value}: it is "
                f"{_describe(self.head)}"
            )
        return self.hash.hexdigest(), self.size


def _checked(image: CachedImage, kind: ImageKind, source: str) -> CachedImage:
    """A cached image, if it is a ``kind`` too (one URL may be asked for as two kinds)."""
    try:
        with image.path.open("rb") as blob:
            head = blob.read(HEAD_SIZE)
    except OSError as exc:
        raise ImageError(f"{kind.value} {_shown(source)} cannot be read: {exc}") from None
    if not looks_like(kind, head):
        raise ImageError(
            f"{kind.value} {_shown(source)} is not a {kind.value}: it is {_describe(head)}"
        )
    return image


def check_source(source: str, allowed_dirs: tuple[Path, ...]) -> None:
    """Refuse a source that can never be fetched (``ImageError``): neither an http(s) URL
    nor an existing file in ``allowed_dirs``."""
    if _is_file(source):
        _allowed_file(source, tuple(d.resolve() for d in allowed_dirs))
    else:
        _check_url(source)


def _allowed_file(source: str, allowed_dirs: tuple[Path, ...]) -> Path:
    """The file ``source`` names, resolved, if it is in one of ``allowed_dirs`` (resolved)."""
    raw = urlsplit(source).path if source.startswith("file:") else source
    path = Path(raw)
    if not path.is_absolute():
        raise ImageError(f"{source!r} is neither an http(s) URL nor an absolute file path")
    resolved = path.resolve()
    if not any(resolved.is_relative_to(allowed) for allowed in allowed_dirs):
        allowed = ", ".join(str(d) for d in allowed_dirs) or "none"
        raise ImageError(f"file {path} is not in a directory netboot.image_dirs allows ({allowed})")
    if not resolved.is_file():
        raise ImageError(f"file {path} does not exist")
    return resolved


def _is_file(source: str) -> bool:
    return source.startswith(("/", "file:"))


def _check_url(source: str) -> None:
    parts = urlsplit(source)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImageError(f"{_shown(source)} is neither an http(s) URL nor an absolute file path")


def _shown(source: str) -> str:
    """A source as logs and messages show it: credentials in a URL are masked."""
    return mask_url(source) if "://" in source else source


def _digest_of(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as src:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _write_atomically(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".writing-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.replace(temporary, path)
    except BaseException:  # re-raised: no half-written entry stays
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


_CACHES: dict[Path, ImageCache] = {}
_CACHES_LOCK = threading.Lock()


def cache_for(settings: NetbootSettings) -> ImageCache:
    """This process's cache in ``settings.image_cache_dir``: one object per directory, so
    that a conductor preparing a boot and the API serving it (the all-in-one) wait for
    the same fetch instead of making two."""
    root = settings.image_cache_dir
    if root is None:
        raise ImageError("conductor.netboot.image_cache_dir is not set")
    with _CACHES_LOCK:
        cache = _CACHES.get(root)
        if cache is None:
            cache = ImageCache(
                root,
                allowed_dirs=tuple(settings.image_dirs),
                max_size=settings.max_image_size,
                timeout=settings.image_fetch_timeout,
                pace=FetchPace(
                    settings.image_fetch_deadline,
                    settings.image_fetch_min_rate,
                    settings.image_fetch_grace,
                ),
                peers=peer_policy(settings),
                bounds=CacheBounds(
                    settings.image_cache_max_size,
                    settings.image_cache_min_age,
                    settings.image_cache_pin_days,
                ),
            )
            _CACHES[root] = cache
        return cache


def peer_policy(settings: NetbootSettings) -> outbound_http.PeerPolicy:
    """Where a URL a tenant gave may lead: nowhere ``outbound_http.NEVER_BY_DEFAULT`` or
    this host's own addresses name, unless ``netboot.fetch_allowed_networks`` allows it."""
    return outbound_http.PeerPolicy(
        (*outbound_http.NEVER_BY_DEFAULT, *_own_networks(settings)),
        settings.fetch_allowed_networks,
    )


def _own_networks(settings: NetbootSettings) -> list[outbound_http.IPNetwork]:
    """This host's addresses, as its name resolves, and the address nodes reach it on
    (``http_url``): a tenant's URL must not lead back into metalforge's own services."""
    hosts = [socket.gethostname()]
    if settings.http_url:
        hosts.append(urlsplit(settings.http_url).hostname or "")
    found: list[outbound_http.IPNetwork] = []
    for host in filter(None, hosts):
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError:
            continue  # a name that does not resolve leads nowhere
        for info in infos:
            address = str(info[4][0]).split("%", 1)[0]
            found.append(ipaddress.ip_network(address))
    return found
