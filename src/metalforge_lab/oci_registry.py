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


class TokenRealm(StartStop):
    """A registry's token service, as Docker Hub's or Quay's: ``GET /token?service&scope``
    answers a JWT (RS256, its certificate in the ``x5c`` header) granting the scope's
    actions, to the ``users`` by HTTP Basic (push and pull) and, when ``anonymous_pull``,
    to anyone for pulls. The registry trusts the certificate (``rootcertbundle``)."""

    SERVICE = "lab-registry"
    ISSUER = "lab-token-issuer"

    def __init__(
        self, workdir: Path, users: dict[str, str], *, anonymous_pull: bool = False
    ) -> None:
        self.workdir = workdir
        self.users = users
        self.anonymous_pull = anonymous_pull
        self.server: Any = None
        self.issued = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def start(self) -> None:
        import datetime as dt
        import http.server
        import threading

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, self.ISSUER)])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .sign(self.key, hashes.SHA256())
        )
        self.cert_der = cert.public_bytes(serialization.Encoding.DER)
        self.bundle = self.workdir / "token-ca.pem"
        self.bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        realm = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                answer = realm.grant(self.path, self.headers.get("Authorization"))
                body = json.dumps(answer[1]).encode()
                self.send_response(answer[0])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def grant(self, path: str, authorization: str | None) -> tuple[int, dict[str, Any]]:
        """The token for a request (status and JSON body)."""
        import base64
        import urllib.parse

        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        user = None
        if authorization and authorization.startswith("Basic "):
            name, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
            if self.users.get(name) != password:
                return 401, {"details": "wrong credentials"}
            user = name
        access = []
        for scope in query.get("scope", []):
            kind, _, rest = scope.partition(":")
            repository, _, actions = rest.rpartition(":")
            wanted = actions.split(",")
            allowed = wanted if user else [a for a in wanted if a == "pull"]
            if kind == "repository" and (user or self.anonymous_pull) and allowed:
                access.append({"type": "repository", "name": repository, "actions": allowed})
        self.issued += 1
        return 200, {"token": self._token(user or "", access), "expires_in": 300}

    def _token(self, subject: str, access: list[dict[str, Any]]) -> str:
        import base64
        import time as clock

        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        def part(data: Any) -> str:
            raw = json.dumps(data, separators=(",", ":")).encode()
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

        now = int(clock.time())
        header = {"alg": "RS256", "typ": "JWT", "x5c": [base64.b64encode(self.cert_der).decode()]}
        claims = {
            "iss": self.ISSUER,
            "sub": subject,
            "aud": self.SERVICE,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": f"lab-{self.issued}",
            "access": access,
        }
        signed = f"{part(header)}.{part(claims)}".encode()
        signature = self.key.sign(signed, padding.PKCS1v15(), hashes.SHA256())
        return f"{signed.decode()}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class RegistryProcess(StartStop):
    """``docker-registry serve`` on ``127.0.0.1:port`` (module doc)."""

    def __init__(
        self,
        workdir: Path,
        port: int,
        users: dict[str, str] | None = None,
        *,
        token_realm: TokenRealm | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = port
        self.users = users
        self.token_realm = token_realm
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
        if self.token_realm is not None:
            self.token_realm.start()
            config["auth"] = {
                "token": {
                    "realm": self.token_realm.url,
                    "service": TokenRealm.SERVICE,
                    "issuer": TokenRealm.ISSUER,
                    "rootcertbundle": str(self.token_realm.bundle),
                }
            }
        elif self.users:
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
        if self.token_realm is not None:
            self.token_realm.stop()


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


def _session(registry: RegistryProcess, repository: str = "") -> requests.Session:
    """A session that may push to ``repository``: Basic credentials, or a push token."""
    session = requests.Session()
    realm = registry.token_realm
    if realm is None:
        session.auth = registry.auth
        return session
    user, password = next(iter(realm.users.items()))
    granted = requests.get(
        realm.url,
        params={"service": TokenRealm.SERVICE, "scope": f"repository:{repository}:pull,push"},
        auth=(user, password),
        timeout=10,
    )
    granted.raise_for_status()
    session.headers["Authorization"] = f"Bearer {granted.json()['token']}"
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
    session = _session(registry, repository)
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
    _session(registry, repository).put(
        f"{registry.url}/v2/{repository}/manifests/{tag}",
        data=body,
        headers={"Content-Type": INDEX},
        timeout=30,
    ).raise_for_status()
    return f"sha256:{hashlib.sha256(body).hexdigest()}"
