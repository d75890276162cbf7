"""``/v1/nodes/{id}/vmedia``: attach, list and detach virtual media by hand.

On fake-hardware, whose pretend BMC holds what was attached; the Redfish
emulator's drives are in tests/drivers/test_redfish.py. Attaching and
detaching answer 204 once queued, as Ironic's do; the node's conductor then
fetches and attaches, so the tests wait for the drives to show it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import LATEST, create_node, error_text, get_node, version, wait_until
from tests.support.images import image_server
from tests.support.stack import Stack, start_stack
from tests.support.stack import test_settings as stack_settings

ISO = "http://images.example.com/rescue.iso"


def _attach(stack: Stack, ident: str, headers: dict[str, str] = LATEST, **body: Any) -> Any:
    body = {"device_type": "cdrom", "image_url": ISO, "image_download_source": "http", **body}
    return stack.client.post(f"/v1/nodes/{ident}/vmedia", json=body, headers=headers)


def _held(stack: Stack, ident: str) -> dict[str, str | None]:
    response = stack.client.get(f"/v1/nodes/{ident}/vmedia", headers=LATEST)
    assert response.status_code == 200, response.text
    return {d["media_types"][0]: d["image"] for d in response.json() if d["inserted"]}


def _holds(stack: Stack, ident: str, expected: dict[str, str | None]) -> None:
    wait_until(f"the drives hold {expected}", lambda: _held(stack, ident) == expected)


def test_attach_list_and_detach(sqlite_stack: Stack) -> None:
    uuid = create_node(sqlite_stack.client)["uuid"]
    assert _held(sqlite_stack, uuid) == {}
    assert _attach(sqlite_stack, uuid).status_code == 204
    _holds(sqlite_stack, uuid, {"CD": ISO})
    stick = "https://images.example.com/tools.img"
    assert _attach(sqlite_stack, uuid, device_type="disk", image_url=stick).status_code == 204
    _holds(sqlite_stack, uuid, {"CD": ISO, "USBStick": stick})
    listed = sqlite_stack.client.get(f"/v1/nodes/{uuid}/vmedia", headers=LATEST).json()
    assert {"media_types": ["CD", "DVD"], "inserted": True, "image": ISO} in listed

    url = f"/v1/nodes/{uuid}/vmedia?device_types=cdrom"
    assert sqlite_stack.client.delete(url, headers=LATEST).status_code == 204
    _holds(sqlite_stack, uuid, {"USBStick": stick})
    assert sqlite_stack.client.delete(f"/v1/nodes/{uuid}/vmedia", headers=LATEST).status_code == 204
    _holds(sqlite_stack, uuid, {})
    history = sqlite_stack.client.get(f"/v1/nodes/{uuid}/history", headers=LATEST).json()
    assert any("virtual cdrom attached" in e["event"] for e in history["history"])


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"device_type": "tape"}, "Invalid device type"),
        ({"image_url": "ftp://images.example.com/x.iso"}, "URL scheme"),
        ({"image_url": "/var/lib/images/x.iso"}, "URL scheme"),
        ({"image_download_source": "swift"}, "image_download_source"),
        ({"surprise": True}, "surprise"),
        ({"image_url": 7}, "image_url"),
    ],
)
def test_bad_attachments_are_refused_and_change_nothing(
    sqlite_stack: Stack, body: dict[str, Any], text: str
) -> None:
    uuid = create_node(sqlite_stack.client)["uuid"]
    response = _attach(sqlite_stack, uuid, **body)
    assert response.status_code == 400, response.text
    assert text in error_text(response)
    assert _held(sqlite_stack, uuid) == {}


def test_versions_and_unknown_device_types(sqlite_stack: Stack) -> None:
    uuid = create_node(sqlite_stack.client)["uuid"]
    assert _attach(sqlite_stack, uuid, version("1.88")).status_code == 404
    old_list = sqlite_stack.client.get(f"/v1/nodes/{uuid}/vmedia", headers=version("1.92"))
    assert old_list.status_code == 404
    bad = sqlite_stack.client.delete(f"/v1/nodes/{uuid}/vmedia?device_types=tape", headers=LATEST)
    assert bad.status_code == 400
    assert "Invalid device type" in error_text(bad)


def test_local_download_serves_metalforge_s_copy(tmp_path: Path, sqlite_url: str) -> None:
    """``local``: the conductor fetches the image once and gives the BMC metalforge's URL;
    what cannot be fetched, or is not an image of the drive's kind, is left in last_error."""
    content = b"\x00" * 32769 + b"CD001\x01" + b"\x00" * 2042
    settings = stack_settings(
        sqlite_url,
        netboot={
            "image_cache_dir": str(tmp_path / "cache"),
            "http_url": "http://192.0.2.10:6385",
            "fetch_allowed_networks": ["127.0.0.0/8"],
        },
    )
    stack = start_stack(settings)
    try:
        uuid = create_node(stack.client)["uuid"]
        digest = hashlib.sha256(content).hexdigest()
        copy = f"http://192.0.2.10:6385/boot/images/{digest}"
        page = b"# HELP metalforge_nodes Nodes\n" * 2000
        with image_server({"/tools.iso": content, "/metrics": page}) as served:
            source = f"{served.url}/tools.iso"
            for _ in range(2):
                answer = _attach(stack, uuid, image_url=source, image_download_source="local")
                assert answer.status_code == 204, answer.text
                _holds(stack, uuid, {"CD": copy})
            assert served.requests["/tools.iso"] == 1
            for path, reason in (("/none.iso", "answered 404"), ("/metrics", "is not a virtual")):
                answer = _attach(
                    stack, uuid, image_url=f"{served.url}{path}", image_download_source="local"
                )
                assert answer.status_code == 204, answer.text
                failed = wait_until(
                    f"the attach of {path} failed",
                    lambda: get_node(stack.client, uuid)["last_error"],
                )
                assert f"Could not attach device cdrom to node {uuid}" in failed
                assert reason in failed
        _holds(stack, uuid, {"CD": copy})
        served_copy = stack.client.get(f"/boot/images/{digest}")
        assert served_copy.status_code == 200
        assert served_copy.content == content
        # The copy is kept (pinned) while attached, and may be evicted once ejected.
        pins = tmp_path / "cache" / "pins"
        assert [p.name for p in pins.glob("*.json")], "pinned while attached"
        assert stack.client.delete(f"/v1/nodes/{uuid}/vmedia", headers=LATEST).status_code == 204
        _holds(stack, uuid, {})
        assert list(pins.glob("*.json")) == []
    finally:
        stack.stop()


def test_a_method_not_served_is_405_or_before_1_89_404(sqlite_stack: Stack) -> None:
    """Ironic routes by version first: tempest PUTs to see 404 below 1.89, not 405."""
    uuid = create_node(sqlite_stack.client)["uuid"]
    body = {"device_type": "CDROM", "image_url": "http://image"}
    for old in ("1.88", "1.79"):
        answer = sqlite_stack.client.put(
            f"/v1/nodes/{uuid}/vmedia", json=body, headers=version(old)
        )
        assert answer.status_code == 404, answer.text
    now = sqlite_stack.client.put(f"/v1/nodes/{uuid}/vmedia", json=body, headers=version("1.89"))
    assert now.status_code == 405
