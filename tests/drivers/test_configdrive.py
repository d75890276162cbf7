"""A config drive given as JSON is built into the ISO the agent writes beside the image.

The ISO is read back with xorriso, which ``make test`` installs (as a
machine's cloud-init reads it: the volume labelled ``config-2``,
``openstack/latest/*``).
"""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
from pathlib import Path

import pytest

from metalforge.db.models import Node
from metalforge.drivers.agent import configdrive
from metalforge.drivers.base import StepFailed


def _node(drive: object, name: str | None = "node-1") -> Node:
    return Node(
        uuid="11111111-2222-3333-4444-555555555555",
        name=name,
        instance_info={"configdrive": drive},
    )


def _unpack(encoded: str, into: Path) -> tuple[str, Path]:
    """The ISO's volume id and the directory its files were extracted to."""
    iso = into / "drive.iso"
    iso.write_bytes(gzip.decompress(base64.b64decode(encoded)))
    tree = into / "tree"
    subprocess.run(
        ["xorriso", "-osirrox", "on", "-indev", str(iso), "-extract", "/", str(tree)],
        check=True,
        capture_output=True,
    )
    shown = subprocess.run(
        ["xorriso", "-indev", str(iso), "-pvd_info"], check=True, capture_output=True, text=True
    )
    volume = next(
        line.split(":", 1)[1].strip()
        for line in shown.stdout.splitlines()
        if line.startswith("Volume Id")
    )
    return volume, tree / "openstack" / "latest"


def test_json_is_built_into_a_config_2_iso_with_the_nodes_identity(tmp_path: Path) -> None:
    drive = {
        "meta_data": {"hostname": "web-1"},
        "user_data": "#cloud-config\nruncmd: [true]\n",
        "network_data": {"links": [], "networks": [], "services": []},
        "vendor_data": {"site": "a"},
    }
    built = configdrive.for_image(_node(drive))
    assert built is not None
    volume, latest = _unpack(built, tmp_path)
    assert volume == "config-2"
    meta = json.loads((latest / "meta_data.json").read_text())
    assert meta == {
        "hostname": "web-1",
        "uuid": "11111111-2222-3333-4444-555555555555",
        "name": "node-1",
    }
    assert (latest / "user_data").read_text() == drive["user_data"]
    assert json.loads((latest / "network_data.json").read_text()) == drive["network_data"]
    assert json.loads((latest / "vendor_data2.json").read_text()) == {"site": "a"}


def test_user_data_given_as_json_is_written_as_json_and_own_ids_are_kept(tmp_path: Path) -> None:
    ignition = {"ignition": {"version": "3.2.0"}}
    drive = {"meta_data": {"uuid": "mine"}, "user_data": ignition}
    built = configdrive.for_image(_node(drive, name=None))
    assert built is not None
    _volume, latest = _unpack(built, tmp_path)
    assert json.loads((latest / "meta_data.json").read_text()) == {"uuid": "mine"}
    assert json.loads((latest / "user_data").read_text()) == ignition


def test_a_ready_made_drive_or_url_is_passed_on_and_none_is_none() -> None:
    assert configdrive.for_image(_node("H4sIAAAA")) == "H4sIAAAA"
    assert configdrive.for_image(_node("https://example.test/cd")) == "https://example.test/cd"
    assert configdrive.for_image(_node(None)) is None
    assert configdrive.for_image(_node({})) is None


@pytest.mark.parametrize(
    ("drive", "message"),
    [
        ({"meta_data": ["x"]}, "meta_data must be an object"),
        ({"user_data": 5}, "user_data must be text, an object or a list"),
        (7, "must be a string or an object, not int"),
    ],
)
def test_a_drive_that_cannot_be_built_fails_the_step_naming_why(
    drive: object, message: str
) -> None:
    with pytest.raises(StepFailed, match=message):
        configdrive.for_image(_node(drive))
