"""The deploy image cache: fetched once, checked, stored under its digest, never half."""

from __future__ import annotations

import hashlib
import http.server
import ipaddress
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from metalforge.netboot.images import (
    CacheBounds,
    FetchPace,
    ImageCache,
    ImageError,
    ImageKind,
    looks_like,
)
from metalforge.outbound_http import NEVER_BY_DEFAULT, PeerPolicy
from tests.support.api import wait_until
from tests.support.images import ImageServer, image_server, kernel_bytes, ramdisk_bytes
from tests.support.stalling import stalling

KERNEL = kernel_bytes()
RAMDISK = ramdisk_bytes()


@pytest.fixture
def server() -> Iterator[ImageServer]:
    with image_server(
        {
            "/vmlinuz": KERNEL,
            "/initrd": RAMDISK,
            "/error.html": b"<html><body>Not what you asked for</body></html>",
            "/empty": b"",
            "/big": KERNEL + b"\0" * (2 * 1024 * 1024),
        }
    ) as served:
        yield served


LOOPBACK_ALLOWED = PeerPolicy(NEVER_BY_DEFAULT, [ipaddress.ip_network("127.0.0.0/8")])
"""The tests' image servers are on this host's loopback, which a deployment refuses."""


def cache(root: Path, **options: object) -> ImageCache:
    settings: dict[str, object] = {"max_size": 1024 * 1024, "timeout": 10.0}
    settings.setdefault("peers", LOOPBACK_ALLOWED)
    settings.update(options)
    return ImageCache(root, **settings)  # type: ignore[arg-type]


def test_an_image_is_fetched_once_and_stored_under_its_digest(
    server: ImageServer, tmp_path: Path
) -> None:
    images = cache(tmp_path)
    first = images.fetch(f"{server.url}/vmlinuz", ImageKind.KERNEL)
    assert first.digest == hashlib.sha256(KERNEL).hexdigest()
    assert first.size == len(KERNEL)
    assert first.path.read_bytes() == KERNEL
    again = images.fetch(f"{server.url}/vmlinuz", ImageKind.KERNEL)
    assert again == first
    # Another process's cache in the same directory finds it too, without fetching.
    assert cache(tmp_path).cached(f"{server.url}/vmlinuz") == first
    assert server.requests["/vmlinuz"] == 1
    assert images.blob(first.digest) == first
    assert images.blob("0" * 64) is None
    assert images.blob("../../etc/passwd") is None


def test_concurrent_fetches_of_one_source_download_it_once(
    server: ImageServer, tmp_path: Path
) -> None:
    images = cache(tmp_path)
    server.gate.clear()
    results: list[str] = []

    def fetch() -> None:
        results.append(images.fetch(f"{server.url}/initrd", ImageKind.RAMDISK).digest)

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for thread in threads:
        thread.start()
    wait_until("the first fetch to reach the server", lambda: server.requests["/initrd"] == 1)
    server.gate.set()
    for thread in threads:
        thread.join(30)
    assert results == [hashlib.sha256(RAMDISK).hexdigest()] * 4
    assert server.requests["/initrd"] == 1


@pytest.mark.parametrize(
    ("path", "kind", "message"),
    [
        ("/error.html", ImageKind.KERNEL, "is not a kernel: it is an HTML page"),
        ("/vmlinuz", ImageKind.RAMDISK, "is not a ramdisk: it is a kernel"),
        ("/empty", ImageKind.RAMDISK, "is not a ramdisk: it is nothing (it is empty)"),
        ("/missing", ImageKind.KERNEL, "the server answered 404"),
        ("/big", ImageKind.KERNEL, "is larger than netboot.max_image_size (1048576 bytes)"),
    ],
)
def test_what_is_not_the_image_it_claims_is_refused_and_leaves_nothing(
    server: ImageServer, tmp_path: Path, path: str, kind: ImageKind, message: str
) -> None:
    images = cache(tmp_path)
    with pytest.raises(ImageError) as refused:
        images.fetch(f"{server.url}{path}", kind)
    assert message in str(refused.value)
    assert images.cached(f"{server.url}{path}") is None
    assert list((tmp_path / "blobs").iterdir()) == []  # no half-written file either


def test_a_server_out_of_reach_is_an_image_error_and_credentials_are_masked(
    tmp_path: Path,
) -> None:
    images = cache(tmp_path, timeout=2.0)
    with pytest.raises(ImageError) as refused:
        images.fetch("http://deployer:s3cret-pw@127.0.0.1:9/vmlinuz", ImageKind.KERNEL)
    assert "could not be fetched: ConnectionError" in str(refused.value)
    assert "s3cret-pw" not in str(refused.value)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("ftp://example.com/vmlinuz", "neither an http(s) URL nor an absolute file path"),
        ("vmlinuz", "neither an http(s) URL nor an absolute file path"),
        ("http:///vmlinuz", "neither an http(s) URL nor an absolute file path"),
        ("/etc/passwd", "is not in a directory netboot.image_dirs allows"),
        ("file:///etc/shadow", "is not in a directory netboot.image_dirs allows"),
    ],
)
def test_sources_that_can_never_be_fetched_are_refused_before_any_fetch(
    tmp_path: Path, source: str, message: str
) -> None:
    images = cache(tmp_path / "cache", allowed_dirs=(tmp_path / "images",))
    with pytest.raises(ImageError) as refused:
        images.check_source(source)
    assert message in str(refused.value)


def test_files_are_served_only_from_the_allowed_directories(tmp_path: Path) -> None:
    allowed = tmp_path / "images"
    allowed.mkdir()
    (allowed / "vmlinuz").write_bytes(KERNEL)
    (tmp_path / "secret.gz").write_bytes(RAMDISK)
    (allowed / "escape").symlink_to(tmp_path / "secret.gz")
    images = cache(tmp_path / "cache", allowed_dirs=(allowed,))
    found = images.fetch(str(allowed / "vmlinuz"), ImageKind.KERNEL)
    assert found.path.read_bytes() == KERNEL
    assert images.fetch(f"file://{allowed}/vmlinuz", ImageKind.KERNEL) == found
    outside = (str(tmp_path / "secret.gz"), str(allowed / "escape"), f"{allowed}/../secret.gz")
    for source in outside:
        with pytest.raises(ImageError, match=r"not in a directory netboot\.image_dirs allows"):
            images.fetch(source, ImageKind.RAMDISK)
    with pytest.raises(ImageError, match="does not exist"):
        images.fetch(str(allowed / "missing"), ImageKind.KERNEL)


def test_a_background_fetch_reports_its_failure_and_is_tried_again(
    server: ImageServer, tmp_path: Path
) -> None:
    images = cache(tmp_path, retry_after=0.0)
    source = f"{server.url}/later"
    assert images.prefetch(source, ImageKind.KERNEL) is None
    wait_until("the failed fetch to be recorded", lambda: server.requests["/later"] == 1)
    failure = wait_until(
        "the failure to be reported", lambda: images.prefetch(source, ImageKind.KERNEL)
    )
    assert "the server answered 404" in str(failure)
    server.files["/later"] = KERNEL
    # Asked again (as each of the node's script requests does), it is fetched again.
    wait_until(
        "the image to arrive",
        lambda: images.prefetch(source, ImageKind.KERNEL) is None and images.cached(source),
    )
    assert images.cached(source) is not None
    assert images.prefetch(source, ImageKind.KERNEL) is None  # nothing failed any more


@pytest.mark.parametrize(
    ("head", "kind", "expected"),
    [
        (kernel_bytes(4096), ImageKind.KERNEL, True),
        (b"\0" * 0x38 + b"ARM\x64" + b"\0" * 100, ImageKind.KERNEL, True),
        (b"\x7fELF" + b"\0" * 100, ImageKind.KERNEL, False),
        (ramdisk_bytes()[:64], ImageKind.RAMDISK, True),
        (b"\xfd7zXZ\x00rest", ImageKind.RAMDISK, True),
        (b"\x28\xb5\x2f\xfdrest", ImageKind.RAMDISK, True),
        (b"070701" + b"0" * 100, ImageKind.RAMDISK, True),
        (b"<!DOCTYPE html>", ImageKind.RAMDISK, False),
        (b"\0" * 0x8001 + b"CD001\x01", ImageKind.OPTICAL, True),
        (b"\0" * 0x8001 + b"BEA01\x01", ImageKind.OPTICAL, True),
        (b"\0" * 510 + b"\x55\xaa" + b"\0" * 0x8000, ImageKind.OPTICAL, False),
        (b"\0" * 510 + b"\x55\xaa", ImageKind.DISK, True),
        (b"\0" * 512 + b"EFI PART", ImageKind.DISK, True),
        (b"\0" * 0x8001 + b"CD001\x01", ImageKind.DISK, True),
        (b"GET / HTTP/1.0\r\n" + b"\0" * 0x8000, ImageKind.DISK, False),
        (b"# HELP metalforge_nodes\n" + b"x" * 0x8000, ImageKind.OPTICAL, False),
    ],
    # Named, not shown: the same ids in every worker, whatever the bytes.
    ids=[
        "bzimage",
        "arm64",
        "elf",
        "gzip-cpio",
        "xz",
        "zstd",
        "cpio",
        "html",
        "iso9660",
        "udf",
        "mbr-on-cd",
        "mbr",
        "gpt",
        "iso-on-usb",
        "http-text",
        "metrics-page",
    ],
)
def test_kinds_are_told_by_their_first_bytes(head: bytes, kind: ImageKind, expected: bool) -> None:
    assert looks_like(kind, head) is expected


def test_an_image_built_from_others_is_built_once_and_served_by_its_own_digest(
    tmp_path: Path,
) -> None:
    built: list[Path] = []
    gate = threading.Event()

    def build(out: Path) -> None:
        gate.wait(10)
        built.append(out)
        out.write_bytes(b"an ISO of kernel and ramdisk")

    images = cache(tmp_path)
    results: list[object] = []
    callers = [
        threading.Thread(target=lambda: results.append(images.derived("inputs-1", build)))
        for _ in range(3)
    ]
    for caller in callers:
        caller.start()
    gate.set()
    for caller in callers:
        caller.join(10)
    assert len(built) == 1
    digest = hashlib.sha256(b"an ISO of kernel and ramdisk").hexdigest()
    assert {getattr(r, "digest", None) for r in results} == {digest}
    assert images.blob(digest) is not None
    assert cache(tmp_path).derived("inputs-1", build).digest == digest  # a new process too
    assert len(built) == 1


def test_a_failed_build_leaves_nothing_and_is_tried_again(tmp_path: Path) -> None:
    def broken(out: Path) -> None:
        out.write_bytes(b"half")
        raise OSError("disk full")

    images = cache(tmp_path)
    with pytest.raises(OSError, match="disk full"):
        images.derived("inputs-2", broken)
    assert [p.name for p in (tmp_path / "blobs").iterdir()] == []

    def whole(out: Path) -> None:
        out.write_bytes(b"whole")

    image = images.derived("inputs-2", whole)
    assert image.path.read_bytes() == b"whole"


def test_a_trickling_server_is_given_up_once_it_is_too_slow(tmp_path: Path) -> None:
    """One byte now and then keeps every per-read timeout happy: the minimum rate does not."""
    pace = FetchPace(deadline=600, min_rate=1000, grace=0.5)
    with stalling("trickle", interval=0.05) as peer:
        images = cache(tmp_path, pace=pace, timeout=300.0)
        with pytest.raises(ImageError, match=r"came too slowly: .* under netboot\.image_fetch_min"):
            images.fetch(f"{peer.url}/slow.iso", ImageKind.OPTICAL)
    assert list((tmp_path / "blobs").iterdir()) == [], "nothing half-fetched stays"


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_a_download_that_outlives_its_deadline_is_cut_off(tmp_path: Path, mode: str) -> None:
    pace = FetchPace(deadline=0.5, min_rate=0, grace=0.1)
    with stalling(mode) as peer:  # type: ignore[arg-type]
        images = cache(tmp_path, pace=pace, timeout=300.0)
        with pytest.raises(ImageError) as caught:
            images.fetch(f"{peer.url}/stuck.iso", ImageKind.OPTICAL)
    assert str(caught.value) == (
        f"virtual CD image {peer.url}/stuck.iso was not fetched within 0.5 s "
        "(netboot.image_fetch_deadline); cut off"
    )


def test_an_image_cached_as_one_kind_is_checked_again_as_another(tmp_path: Path) -> None:
    disk = b"\0" * 510 + b"\x55\xaa" + b"\0" * 0x8000
    with image_server({"/usb.img": disk}) as served:
        images = cache(tmp_path)
        source = f"{served.url}/usb.img"
        assert images.fetch(source, ImageKind.DISK).size == len(disk)
        with pytest.raises(ImageError, match="is not a virtual CD image"):
            images.fetch(source, ImageKind.OPTICAL)


def test_by_default_a_download_may_not_reach_this_host(server: ImageServer, tmp_path: Path) -> None:
    images = cache(tmp_path, peers=PeerPolicy(NEVER_BY_DEFAULT))
    with pytest.raises(ImageError) as caught:
        images.fetch(f"{server.url}/vmlinuz", ImageKind.KERNEL)
    assert str(caught.value) == (
        f"kernel {server.url}/vmlinuz may not be fetched: 127.0.0.1 is in 127.0.0.0/8, which "
        "outbound fetches may not reach (netboot.fetch_allowed_networks)"
    )
    assert server.requests.get("/vmlinuz", 0) == 0, "refused before a byte was sent"


def test_a_redirect_to_a_refused_address_is_refused(tmp_path: Path) -> None:
    """The first server is allowed, the one it redirects to (this host's loopback) is not."""
    with image_server({"/vmlinuz": KERNEL}) as inner:

        class Redirect(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(302)
                self.send_header("Location", f"{inner.url}/vmlinuz")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        outer = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Redirect)
        thread = threading.Thread(target=outer.serve_forever, daemon=True)
        thread.start()
        try:
            only_outer = PeerPolicy(NEVER_BY_DEFAULT, [ipaddress.ip_network("127.0.0.2/32")])
            images = cache(tmp_path, peers=only_outer)
            source = f"http://127.0.0.2:{outer.server_address[1]}/vmlinuz"
            with pytest.raises(ImageError, match=r"127\.0\.0\.1 is in 127\.0\.0\.0/8"):
                images.fetch(source, ImageKind.KERNEL)
        finally:
            outer.shutdown()
            outer.server_close()
        assert inner.requests.get("/vmlinuz", 0) == 0


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.0.0.1", True),
        ("169.254.169.254", True),
        ("0.0.0.0", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("fe80::1%eth0", True),
        ("fd00:ec2::254", True),
        ("10.20.30.40", False),
        ("192.0.2.7", False),
        ("2001:db8::7", False),
        ("fd12:3456::7", False),
    ],
)
def test_what_is_refused_by_default(address: str, refused: bool) -> None:
    assert (PeerPolicy(NEVER_BY_DEFAULT).refuses(address) is not None) is refused


@pytest.mark.parametrize("source", ["file:///dev/zero", "/dev/zero", "file:///etc/shadow"])
def test_a_file_outside_the_allowed_directories_or_no_regular_file_is_refused(
    tmp_path: Path, source: str
) -> None:
    """Ironic's 2026 class: ``file:///dev/zero`` as an image URL tied up its threads."""
    for allowed in ((), (Path("/dev"), Path("/etc"))):
        images = cache(tmp_path, allowed_dirs=allowed)
        with pytest.raises(
            ImageError, match=r"not in a directory|does not exist|: it is text"
        ) as e:
            images.fetch(source, ImageKind.KERNEL)
        assert "root:" not in str(e.value), "an error never quotes what the file holds"


def test_the_cache_evicts_the_least_recently_used_images_no_node_pins(tmp_path: Path) -> None:
    kernels = {f"/k{n}": kernel_bytes(4096) + bytes([n]) * 2000 for n in range(4)}
    with image_server(kernels) as served:
        roomy = cache(tmp_path)
        fetched = {}
        for age, path in enumerate(sorted(kernels)):
            fetched[path] = roomy.fetch(f"{served.url}{path}", ImageKind.KERNEL)
            # Used at distinct times, oldest first, whatever the clock's resolution.
            os.utime(fetched[path].path, (1_000_000 + age, 1_000_000 + age))
        # The same cache, now bounded to two of the four.
        images = cache(tmp_path, bounds=CacheBounds(max_size=2 * 6200, min_age=0, pin_days=30))
        images.pin("node-1", "ramdisk", [fetched["/k0"]])
        images.evict()
        left = {p for p, image in fetched.items() if images.blob(image.digest) is not None}
        assert left == {"/k0", "/k3"}, "the pinned one stays, then the most recent"
        images.unpin("node-1", "ramdisk")
        # An evicted image is fetched again when it is needed, and the least recently used
        # one left (no longer pinned) makes room for it.
        again = images.fetch(f"{served.url}/k1", ImageKind.KERNEL)
        assert again.digest == fetched["/k1"].digest
        assert served.requests["/k1"] == 2
        assert images.blob(fetched["/k0"].digest) is None
        assert images.blob(fetched["/k3"].digest) is not None


def test_an_image_used_lately_or_pinned_by_an_old_pin_is_kept_or_not(tmp_path: Path) -> None:
    content = kernel_bytes(4096) + b"x" * 3000
    with image_server({"/k": content, "/j": content + b"j"}) as served:
        image = cache(tmp_path).fetch(f"{served.url}/k", ImageKind.KERNEL)
        images = cache(tmp_path, bounds=CacheBounds(max_size=1, min_age=3600, pin_days=30))
        assert images.evict() == 0, "used in the last min_age seconds"
        other = cache(tmp_path / "old").fetch(f"{served.url}/j", ImageKind.KERNEL)
        old = cache(tmp_path / "old", bounds=CacheBounds(max_size=1, min_age=0, pin_days=1))
        old.pin("node-gone", "ramdisk", [other])
        pin = next((tmp_path / "old" / "pins").glob("*.json"))
        os.utime(pin, (1_000_000, 1_000_000))  # pinned long ago by a node since deleted
        assert old.evict() == other.size
        assert image.path.exists()
