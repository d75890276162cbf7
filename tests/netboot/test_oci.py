"""Disk images named ``oci://``, resolved against a real registry (Debian's docker-registry)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from metalforge.config import load_settings
from metalforge.db.models import Node
from metalforge.drivers.agent.deploy import AgentDeploy
from metalforge.drivers.agent.image import oci_image_info
from metalforge.drivers.base import ReadOnlyTask, StepFailed
from metalforge.netboot import oci
from metalforge.netboot.images import ImageError
from metalforge_lab.oci_registry import RegistryProcess, TokenRealm, push_disk_image, push_index
from metalforge_lab.ports import free_port

DISK = b"\xeb\x63\x90" + b"\0" * 4093
USER, PASSWORD = "puller", "s3cret-pull"


def _registry(path: Path, users: dict[str, str] | None = None) -> Iterator[RegistryProcess]:
    if shutil.which("docker-registry") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the OCI registry: install docker-registry")
        pytest.skip("docker-registry is not installed")
    with RegistryProcess(path, free_port(), users) as registry:
        yield registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    yield from _registry(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    yield from _registry(tmp_path_factory.mktemp("locked"), {USER: PASSWORD})


def _settings(registry: RegistryProcess, **netboot: Any) -> Any:
    return load_settings(
        conductor={
            "netboot": {
                "oci_plain_http_registries": [registry.host],
                "fetch_allowed_networks": ["127.0.0.0/8"],
                **netboot,
            }
        }
    ).conductor.netboot


def _fetch(image: oci.OciImage) -> bytes:
    """The blob as the agent fetches it: the URL with the header it is handed."""
    headers = {}
    if image.authorization:
        headers["Authorization"] = image.authorization
    answer = requests.get(image.url, headers=headers, timeout=10)
    answer.raise_for_status()
    return answer.content


def test_a_tag_resolves_to_the_nodes_architecture_and_the_best_disk_type(
    registry: RegistryProcess,
) -> None:
    raw = push_disk_image(registry, "os/disk", "raw-amd64", DISK, disktype="raw")
    qcow = push_disk_image(registry, "os/disk", "qcow-amd64", DISK + b"q", disktype="qcow2")
    arm = push_disk_image(registry, "os/disk", "raw-arm64", DISK + b"a", disktype="raw")
    entries = [(qcow, "amd64", "qcow2"), (arm, "arm64", "raw"), (raw, "amd64", "raw")]
    push_index(registry, "os/disk", "4.20", entries)
    settings = _settings(registry)
    url = f"oci://{registry.host}/os/disk:4.20"

    found = oci.resolve(url, settings, secret=None, cpu_arch="x86_64")
    assert (found.manifest, found.disk_format) == (raw.digest, "raw")
    assert found.sha256 == hashlib.sha256(DISK).hexdigest()
    assert _fetch(found) == DISK
    assert found.authorization is None

    arm_found = oci.resolve(url, settings, secret=None, cpu_arch="aarch64")
    assert arm_found.manifest == arm.digest
    assert _fetch(arm_found) == DISK + b"a"

    info = oci_image_info(found, "node-1")
    assert info["urls"] == [found.url]
    assert (info["os_hash_algo"], info["os_hash_value"]) == ("sha256", found.sha256)
    assert (info["disk_format"], info["stream_raw_images"]) == ("raw", True)
    assert "image_request_authorization" not in info


def test_a_digest_names_one_manifest_whose_bytes_must_match(registry: RegistryProcess) -> None:
    pushed = push_disk_image(registry, "os/pinned", "v1", DISK, disktype="qcow2")
    settings = _settings(registry)
    found = oci.resolve(
        f"oci://{registry.host}/os/pinned@{pushed.digest}", settings, secret=None, cpu_arch=None
    )
    assert (found.manifest, found.disk_format) == (pushed.digest, "qcow2")
    wrong = "sha256:" + "0" * 64
    with pytest.raises(ImageError, match=f"os/pinned has no {wrong}"):
        oci.resolve(
            f"oci://{registry.host}/os/pinned@{wrong}", settings, secret=None, cpu_arch=None
        )


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("oci://{host}/os/absent:v1", "os/absent has no v1"),
        ("oci://{host}/os/container:v1", "is a container image, not a disk image"),
        ("oci://{host}/os/layers:v1", "has 3 layers; a disk image artifact has one"),
        ("oci://{host}/os/arm-only:v1", "no disk image for x86_64 CPUs"),
        ("http://{host}/os/disk:v1", "is not an OCI reference"),
        ("oci://{host}/os/disk@md5:abc", "only sha256 digests"),
    ],
)
def test_what_is_no_disk_image_is_refused_naming_why(
    registry: RegistryProcess, reference: str, message: str
) -> None:
    push_disk_image(registry, "os/container", "v1", DISK, disktype=None, artifact=False)
    push_disk_image(registry, "os/layers", "v1", DISK, layers=3)
    arm = push_disk_image(registry, "os/arm-only", "arm", DISK)
    push_index(registry, "os/arm-only", "v1", [(arm, "arm64", "raw")])
    with pytest.raises(ImageError, match=message):
        oci.resolve(
            reference.format(host=registry.host),
            _settings(registry),
            secret=None,
            cpu_arch="x86_64",
        )


def test_a_registry_on_the_hosts_own_networks_is_refused_by_default(
    registry: RegistryProcess,
) -> None:
    push_disk_image(registry, "os/local", "v1", DISK)
    settings = _settings(registry, fetch_allowed_networks=[])
    with pytest.raises(ImageError, match=r"may not be reached: .*fetch_allowed_networks"):
        oci.resolve(f"oci://{registry.host}/os/local:v1", settings, secret=None, cpu_arch=None)


def test_a_registry_that_wants_credentials_gets_the_pull_secret(locked: RegistryProcess) -> None:
    push_disk_image(locked, "os/private", "v1", DISK)
    settings = _settings(locked)
    url = f"oci://{locked.host}/os/private:v1"
    with pytest.raises(
        ImageError, match=r"wants credentials: set instance_info\.image_pull_secret"
    ):
        oci.resolve(url, settings, secret=None, cpu_arch=None)
    found = oci.resolve(url, settings, secret=f"{USER}:{PASSWORD}", cpu_arch=None)
    assert _fetch(found) == DISK
    info = oci_image_info(found, "node-1")
    header = base64.b64decode(info["image_request_authorization"]).decode()
    assert header == found.authorization
    assert header.startswith("Basic ")


def test_the_agents_write_image_gets_the_blob_and_the_registrys_header(
    locked: RegistryProcess,
) -> None:
    """What ``direct``'s ``write_image`` hands the agent for an ``oci://`` image, as Metal3
    sets it (``image_pull_secret`` as ``user:password``), and a refusal as a step failure."""
    push_disk_image(locked, "os/metal3", "v2", DISK)
    conductor = load_settings(
        conductor={
            "netboot": {
                "oci_plain_http_registries": [locked.host],
                "fetch_allowed_networks": ["127.0.0.0/8"],
            }
        }
    ).conductor
    node = Node(
        uuid="7d1b6c59-0d3e-4a4f-8f56-1c1f8e4b2a01",
        instance_info={
            "image_source": f"oci://{locked.host}/os/metal3:v2",
            "image_pull_secret": f"{USER}:{PASSWORD}",
        },
        properties={"cpu_arch": "x86_64"},
        driver_info={},
    )
    info = AgentDeploy._image_info(ReadOnlyTask(node, conductor))
    assert info["urls"][0].endswith(
        f"/v2/os/metal3/blobs/sha256:{hashlib.sha256(DISK).hexdigest()}"
    )
    assert base64.b64decode(info["image_request_authorization"]).decode().startswith("Basic ")
    node.instance_info = {**node.instance_info, "image_pull_secret": "puller:wrong"}
    with pytest.raises(StepFailed, match=r"instance_info\.image_source: .*answered 401"):
        AgentDeploy._image_info(ReadOnlyTask(node, conductor))


@pytest.fixture(scope="module")
def tokened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    """A registry that wants pull tokens from its token service, as public registries do."""
    if shutil.which("docker-registry") is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the OCI registry: install docker-registry")
        pytest.skip("docker-registry is not installed")
    path = tmp_path_factory.mktemp("tokened")
    realm = TokenRealm(path, {USER: PASSWORD}, anonymous_pull=True)
    with RegistryProcess(path, free_port(), token_realm=realm) as registry:
        yield registry


def test_a_registry_with_a_token_service_gets_a_pull_token(tokened: RegistryProcess) -> None:
    """The registry's 401 names a Bearer realm: a pull token is asked for, with the pull
    secret as credentials, or anonymously without one (a public repository)."""
    push_disk_image(tokened, "os/public", "v1", DISK)
    settings = _settings(tokened)
    url = f"oci://{tokened.host}/os/public:v1"
    for secret in (f"{USER}:{PASSWORD}", None):
        found = oci.resolve(url, settings, secret=secret, cpu_arch=None)
        assert found.authorization is not None
        assert found.authorization.startswith("Bearer ")
        assert _fetch(found) == DISK
    with pytest.raises(ImageError, match="gave no pull token for os/public"):
        oci.resolve(url, settings, secret=f"{USER}:wrong", cpu_arch=None)
