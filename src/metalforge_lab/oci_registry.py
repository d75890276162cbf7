"""An OCI registry for the lab and tests: Debian's ``docker-registry`` (the reference
distribution registry), and pushing disk images to it as OCI artifacts.

``RegistryProcess`` serves on 127.0.0.1 over plain HTTP, storing under its
work directory, optionally behind HTTP Basic auth (an htpasswd file of
bcrypt hashes). ``push_disk_image`` uploads a disk image as an artifact the
way ``oras push`` does (an empty config, one layer titled after the file, a
``disktype`` annotation), and ``push_index`` puts several under one tag, one
per CPU architecture and disk type, as a multi-architecture image is
published.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from metalforge_lab.redfish_emulator import write_htpasswd
from metalforge_lab.running import StartStop, terminate

EMPTY = b"{}"
EMPTY_DIGEST = f"sha256:{hashlib.sha256(EMPTY).hexdigest()}"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


class RegistryProcess(StartStop):
    """``docker-registry serve`` on ``127.0.0.1:port`` (module doc)."""

    def __init__(self, workdir: Path, port: int, users: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = port
        self.users = users
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        """As an ``oci://`` reference names the registry."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    @property
    def auth(self) -> tuple[str, str] | None:
        return next(iter(self.users.items())) if self.users else None

    def start(self, timeout: float = 20.0) -> None:
        binary = shutil.which("docker-registry")
        if binary is None:
            raise RuntimeError("docker-registry is not installed (Debian's docker-registry)")
        config = {
            "version": 0.1,
            "log": {"level": "error"},
            "storage": {"filesystem": {"rootdirectory": str(self.workdir / "data")}},
            "http": {"addr": self.host},
        }
        if self.users:
            htpasswd = self.workdir / "htpasswd"
            write_htpasswd(htpasswd, self.users)
            config["auth"] = {"htpasswd": {"realm": "lab", "path": str(htpasswd)}}
        path = self.workdir / "registry.json"  # YAML is a superset of JSON
        path.write_text(json.dumps(config))
        log = (self.workdir / "registry.log").open("wb")
        self.proc = subprocess.Popen([binary, "serve", str(path)], stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {self.log_tail()}")
            try:
                requests.get(f"{self.url}/v2/", timeout=1)
                return
            except requests.ConnectionError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry did not answer in {timeout:g} s: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self.workdir / "registry.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def stop(self) -> None:
        terminate(self.proc)
        self.proc = None


@dataclass(frozen=True)
class Pushed:
    """A manifest pushed: its digest, size and the layer's digest."""

    digest: str
    size: int
    layer: str


def _blob(session: requests.Session, base: str, data: bytes) -> str:
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    if session.head(f"{base}/blobs/{digest}", timeout=30).status_code == 200:
        return digest
    started = session.post(f"{base}/blobs/uploads/", timeout=30)
    started.raise_for_status()
    location = started.headers["Location"]
    if location.startswith("/"):
        location = base.split("/v2/", 1)[0] + location
    joiner = "&" if "?" in location else "?"
    session.put(
        f"{location}{joiner}digest={digest}",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
        timeout=60,
    ).raise_for_status()
    return digest


def _session(registry: RegistryProcess) -> requests.Session:
    session = requests.Session()
    session.auth = registry.auth
    return session


def push_disk_image(
    registry: RegistryProcess,
    repository: str,
    reference: str,
    data: bytes,
    *,
    disktype: str | None = "raw",
    artifact: bool = True,
    layers: int = 1,
) -> Pushed:
    """``data`` as an artifact under ``reference`` (a tag, or None-like digest push when
    ``reference`` is the manifest's own digest); ``artifact=False`` and ``layers`` make
    what a disk image is not, for refusals."""
    session = _session(registry)
    base = f"{registry.url}/v2/{repository}"
    config = _blob(session, base, EMPTY if artifact else b'{"architecture":"amd64"}')
    blobs = [_blob(session, base, data + bytes([n]) * n) for n in range(layers)]
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.empty.v1+json"
            if artifact
            else "application/vnd.oci.image.config.v1+json",
            "digest": config,
            "size": 2 if artifact else 24,
        },
        "layers": [
            {
                "mediaType": "application/octet-stream",
                "digest": blob,
                "size": len(data) + n,
                "annotations": {"org.opencontainers.image.title": "disk.img"},
            }
            for n, blob in enumerate(blobs)
        ],
    }
    if artifact:
        manifest["artifactType"] = "application/vnd.unknown.artifact.v1"
    if disktype is not None:
        manifest["annotations"] = {"disktype": disktype}
    body = json.dumps(manifest, separators=(",", ":")).encode()
    digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
    session.put(
        f"{base}/manifests/{reference or digest}",
        data=body,
        headers={"Content-Type": MANIFEST},
        timeout=30,
    ).raise_for_status()
    if reference != digest:
        session.put(
            f"{base}/manifests/{digest}", data=body, headers={"Content-Type": MANIFEST}, timeout=30
        ).raise_for_status()
    return Pushed(digest, len(body), blobs[0])


def push_index(
    registry: RegistryProcess, repository: str, tag: str, entries: list[tuple[Pushed, str, str]]
) -> str:
    """An index under ``tag`` of pushed manifests, each with its (architecture, disktype)."""
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            {
                "mediaType": MANIFEST,
                "digest": pushed.digest,
                "size": pushed.size,
                "artifactType": "application/vnd.unknown.artifact.v1",
                "platform": {"architecture": arch, "os": "linux"},
                "annotations": {"disktype": disktype},
            }
            for pushed, arch, disktype in entries
        ],
    }
    body = json.dumps(index, separators=(",", ":")).encode()
    _session(registry).put(
        f"{registry.url}/v2/{repository}/manifests/{tag}",
        data=body,
        headers={"Content-Type": INDEX},
        timeout=30,
    ).raise_for_status()
    return f"sha256:{hashlib.sha256(body).hexdigest()}"
