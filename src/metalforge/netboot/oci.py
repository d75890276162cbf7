"""Disk images stored in an OCI registry (``oci://registry/repository:tag`` or ``@sha256:...``).

Metal3 can name an instance image as an OCI artifact (``image_source:
oci://quay.example/org/disk:4.20``, ``image_pull_secret: "user:password"``).
As Ironic does, metalforge resolves the reference through the registry's
distribution API to one blob, the disk image, and hands the agent that
blob's URL with the header that authorizes it; the agent downloads the image
itself and checks it against the layer's digest:

1. authorization: ``GET /v2/``; a 401 naming a ``Bearer`` realm is answered
   by asking the realm for a pull token for the repository (with the pull
   secret as Basic credentials when there is one, anonymously otherwise); a
   ``Basic`` realm gets the secret itself;
2. the manifest: a tag gives an index (or one manifest); entries for another
   CPU architecture than the node's are passed over, and of the rest the
   first by ``disktype`` annotation (``raw`` before ``qcow2``; an entry of an
   unknown disk type is passed over); a digest gives that manifest, whose
   bytes must hash to it;
3. the image: the manifest's one layer (an artifact has an empty config or an
   ``artifactType``; a container image of several layers is no disk image).

Every request goes through the outbound policy of image downloads
(``netboot.fetch_allowed_networks``: a tenant's registry may not be the
host's own services) within ``netboot.image_fetch_deadline``. Registries are
reached over HTTPS, or plain HTTP for those ``netboot.oci_plain_http_registries``
names.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import requests

from metalforge import outbound_http
from metalforge.config import NetbootSettings
from metalforge.netboot.images import ImageError, peer_policy

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
DEADLINE = "netboot.image_fetch_deadline"
_DISK_TYPES = {"raw": "raw", "applehv": "raw", "qcow2": "qcow2", "qemu": "qcow2"}
"""``disktype`` annotations this resolver takes, and the disk format each means."""
_PREFERENCE = ("raw", "applehv", "qcow2", "qemu")
_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REFERENCE = re.compile(
    r"oci://(?P<host>[^/@]+)/(?P<repo>[a-z0-9._/-]+?)(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[a-z0-9]+:[0-9a-zA-Z]+))?"
)


@dataclass(frozen=True)
class Reference:
    """A parsed ``oci://`` image reference."""

    host: str
    repository: str
    tag: str
    digest: str | None

    @property
    def wanted(self) -> str:
        return self.digest or self.tag


@dataclass(frozen=True)
class OciImage:
    """What the agent needs to fetch the disk image an ``oci://`` reference names."""

    url: str
    """The blob's URL on the registry."""
    sha256: str
    """The layer's digest, hex: what the agent checks the image against."""
    disk_format: str | None
    """``raw`` or ``qcow2`` from the ``disktype`` annotation; None when none says."""
    size: int | None
    authorization: str | None = None
    """The ``Authorization`` header value the registry wants for the blob."""
    manifest: str = ""
    """The manifest's digest, as the reference resolved."""


def parse(url: str) -> Reference:
    """``oci://host[:port]/repository[:tag][@sha256:hex]``; ``ImageError`` otherwise."""
    found = _REFERENCE.fullmatch(url)
    if found is None:
        raise ImageError(f"{url!r} is not an OCI reference (oci://registry/repository:tag)")
    digest = found["digest"]
    if digest is not None and not _DIGEST.fullmatch(digest):
        raise ImageError(f"{url!r}: only sha256 digests of 64 hexadecimal digits are taken")
    return Reference(found["host"], found["repo"], found["tag"] or "latest", digest)


class _Registry:
    """One registry conversation: its base URL, session and authorization."""

    def __init__(self, ref: Reference, settings: NetbootSettings) -> None:
        plain = ref.host in settings.oci_plain_http_registries
        self.ref = ref
        self.base = f"{'http' if plain else 'https'}://{ref.host}/v2/{ref.repository}"
        self.root = f"{'http' if plain else 'https'}://{ref.host}/v2/"
        self.session = outbound_http.session()
        self.timeout = settings.image_fetch_timeout
        self.authorization: str | None = None

    def get(self, url: str, accept: str | None = None, auth: Any = None) -> requests.Response:
        headers = {"Accept": accept} if accept else {}
        if self.authorization and auth is None:
            headers["Authorization"] = self.authorization
        return self.session.get(
            url, headers=headers, auth=auth, timeout=self.timeout, allow_redirects=True
        )

    def authorize(self, secret: str | None) -> None:
        """Obtain what the registry wants for a pull of the repository (module doc)."""
        answer = self.get(self.root)
        if answer.status_code == 200:
            return
        challenge = answer.headers.get("WWW-Authenticate", "")
        if answer.status_code != 401 or not challenge:
            raise ImageError(f"the registry {self.ref.host} answered {answer.status_code}")
        scheme = challenge.split(" ", 1)[0].lower()
        user, _, password = (secret or "").partition(":")
        if scheme == "basic":
            if not secret:
                raise ImageError(
                    f"the registry {self.ref.host} wants credentials: set "
                    "instance_info.image_pull_secret (user:password)"
                )
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.authorization = f"Basic {token}"
            return
        realm = re.search(r'realm="([^"]+)"', challenge)
        if scheme != "bearer" or realm is None:
            raise ImageError(f"the registry {self.ref.host} asks for {scheme!r} authorization")
        service = re.search(r'service="([^"]+)"', challenge)
        params = {"scope": f"repository:{self.ref.repository}:pull"}
        if service is not None:
            params["service"] = service.group(1)
        basic = (user, password) if secret else None
        grant = self.session.get(realm.group(1), params=params, auth=basic, timeout=self.timeout)
        try:
            granted = grant.json().get("token") if grant.status_code == 200 else None
        except (ValueError, AttributeError):
            granted = None
        if not isinstance(granted, str) or not granted:
            raise ImageError(
                f"the registry {self.ref.host} gave no pull token for {self.ref.repository} "
                f"(its token service answered {grant.status_code})"
            )
        self.authorization = f"Bearer {granted}"

    def manifest(self, wanted: str, accept: str) -> tuple[dict[str, Any], str]:
        """The manifest or index ``wanted`` (a tag or digest) names, and its digest."""
        answer = self.get(f"{self.base}/manifests/{wanted}", accept)
        if answer.status_code == 404:
            raise ImageError(f"{self.ref.repository} has no {wanted} on {self.ref.host}")
        if answer.status_code != 200:
            raise ImageError(
                f"the registry {self.ref.host} answered {answer.status_code} for "
                f"{self.ref.repository}:{wanted}"
            )
        digest = f"sha256:{hashlib.sha256(answer.content).hexdigest()}"
        if wanted.startswith("sha256:") and digest != wanted:
            raise ImageError(f"the manifest {wanted} the registry sent has the digest {digest}")
        try:
            body = answer.json()
        except ValueError:
            raise ImageError(
                f"the manifest of {self.ref.repository}:{wanted} is not JSON"
            ) from None
        if not isinstance(body, dict):
            raise ImageError(f"the manifest of {self.ref.repository}:{wanted} is not an object")
        return body, digest


def _entries(index: dict[str, Any], cpu_arch: str | None) -> list[dict[str, Any]]:
    """The index's entries a node of ``cpu_arch`` can use, the best disk type first."""
    arch = _ARCHES.get(cpu_arch or "")
    usable = []
    for entry in index.get("manifests") or []:
        if not isinstance(entry, dict):
            continue
        platform = entry.get("platform") or {}
        if arch and platform.get("architecture") and _ARCHES.get(platform["architecture"]) != arch:
            continue
        disktype = (entry.get("annotations") or {}).get("disktype")
        if disktype is not None and disktype not in _DISK_TYPES:
            continue
        usable.append(entry)
    return sorted(
        usable,
        key=lambda e: (
            _PREFERENCE.index(e["annotations"]["disktype"])
            if (e.get("annotations") or {}).get("disktype")
            else len(_PREFERENCE)
        ),
    )


def _image(registry: _Registry, manifest: dict[str, Any], digest: str, disktype: Any) -> OciImage:
    config = manifest.get("config") or {}
    layers = manifest.get("layers") or []
    artifact = bool(manifest.get("artifactType")) or config.get("mediaType") == EMPTY_CONFIG
    if not artifact and disktype is None:
        raise ImageError(
            f"{registry.ref.repository}@{digest} is a container image, not a disk image "
            "artifact (no artifactType, no empty config, no disktype)"
        )
    if len(layers) != 1 or not isinstance(layers[0], dict):
        raise ImageError(
            f"{registry.ref.repository}@{digest} has {len(layers)} layers; a disk image "
            "artifact has one"
        )
    layer = layers[0]
    blob = str(layer.get("digest", ""))
    if not _DIGEST.fullmatch(blob):
        raise ImageError(f"{registry.ref.repository}@{digest}: its layer has no sha256 digest")
    size = layer.get("size")
    return OciImage(
        url=f"{registry.base}/blobs/{blob}",
        sha256=blob.split(":", 1)[1],
        disk_format=_DISK_TYPES.get(str(disktype)) if disktype else None,
        size=size if isinstance(size, int) else None,
        authorization=registry.authorization,
        manifest=digest,
    )


def resolve(
    url: str, settings: NetbootSettings, *, secret: str | None, cpu_arch: str | None
) -> OciImage:
    """The disk image ``url`` names (module doc); ``ImageError`` naming what is wrong."""
    ref = parse(url)
    registry = _Registry(ref, settings)
    with (
        outbound_http.reaching(peer_policy(settings)),
        outbound_http.within(settings.image_fetch_deadline, DEADLINE) as deadline,
    ):
        try:
            registry.authorize(secret)
            if ref.digest is not None:
                manifest, digest = registry.manifest(ref.digest, MANIFEST)
                disktype = (manifest.get("annotations") or {}).get("disktype")
                return _image(registry, manifest, digest, disktype)
            found, digest = registry.manifest(ref.tag, f"{INDEX}, {MANIFEST}")
            if not found.get("manifests"):
                if found.get("mediaType") != MANIFEST:
                    raise ImageError(f"{ref.repository}:{ref.tag} is not an OCI index or manifest")
                disktype = (found.get("annotations") or {}).get("disktype")
                return _image(registry, found, digest, disktype)
            for entry in _entries(found, cpu_arch):
                manifest, child = registry.manifest(str(entry.get("digest")), MANIFEST)
                disktype = (entry.get("annotations") or {}).get("disktype")
                if disktype is None and not entry.get("artifactType"):
                    continue  # a container image's entry
                return _image(registry, manifest, child, disktype)
            raise ImageError(
                f"{ref.repository}:{ref.tag} has no disk image for {cpu_arch or 'any'} CPUs "
                "(an entry with a disktype of raw or qcow2, or an artifact)"
            )
        except (requests.RequestException, OSError) as exc:
            refused = outbound_http.refusal()
            if refused is not None:
                raise ImageError(
                    f"the registry {ref.host} may not be reached: {refused} "
                    "(netboot.fetch_allowed_networks)"
                ) from None
            if deadline.expired:
                raise ImageError(
                    f"the registry {ref.host} did not answer within "
                    f"{settings.image_fetch_deadline:g} s ({DEADLINE})"
                ) from None
            raise ImageError(f"the registry {ref.host} could not be reached: {exc}") from None


def agent_authorization(image: OciImage) -> str | None:
    """The header the agent sends for the blob, as ironic-python-agent takes it
    (``image_request_authorization``: the header value, base64)."""
    if image.authorization is None:
        return None
    return base64.b64encode(image.authorization.encode()).decode()
