"""Virtual disks: sparse files attached as loop devices.

A virtual node's agent erases and writes real block devices, so its disks
must be block devices, but never the machine's own: each is a sparse file in
the lab's state directory behind a ``/dev/loopN`` of its own. Sparse files
cost no space until written, so a few 64 MiB disks per node are free.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

LOOP_MAJOR = 7


class LoopDeviceError(RuntimeError):
    """``losetup`` failed or attached something unexpected."""


@dataclass(frozen=True)
class LoopDisk:
    """One attached disk: its loop device and the file behind it."""

    device: str
    """``/dev/loopN``."""
    backing_file: Path
    minor: int
    """N, the device's minor number: the agent's namespace recreates the node with it."""

    @property
    def serial(self) -> str:
        """The serial the agent reports: the backing file's name, stable across runs."""
        return self.backing_file.name


def _losetup(*args: str) -> str:
    try:
        done = subprocess.run(
            ["losetup", *args], check=True, capture_output=True, text=True, timeout=30
        )
    except subprocess.CalledProcessError as exc:
        raise LoopDeviceError(f"losetup {' '.join(args)}: {exc.stderr.strip()}") from exc
    return done.stdout.strip()


def attach(backing_file: Path, size_bytes: int) -> LoopDisk:
    """Create (or truncate to size) a sparse file and attach it to a free loop device."""
    backing_file.parent.mkdir(parents=True, exist_ok=True)
    with backing_file.open("wb") as handle:
        handle.truncate(size_bytes)
    device = _losetup("--find", "--show", str(backing_file))
    rdev = os.stat(device).st_rdev
    if os.major(rdev) != LOOP_MAJOR or device != f"/dev/loop{os.minor(rdev)}":
        detach(device)
        raise LoopDeviceError(f"losetup attached {backing_file} to unexpected {device}")
    return LoopDisk(device=device, backing_file=backing_file, minor=os.minor(rdev))


def detach(device: str) -> None:
    """Detach one loop device; one that is already gone is fine."""
    try:
        _losetup("--detach", device)
    except LoopDeviceError as exc:
        if "No such device" not in str(exc) and "No such file" not in str(exc):
            raise


def attached_to(backing_file: Path) -> list[str]:
    """Loop devices still attached to ``backing_file`` (what a crashed lab leaves behind)."""
    output = _losetup("--associated", str(backing_file), "--noheadings", "--output", "NAME")
    return [line.strip() for line in output.splitlines() if line.strip()]


def release(backing_file: Path) -> None:
    """Detach everything attached to ``backing_file`` and delete the file."""
    if backing_file.exists():
        for device in attached_to(backing_file):
            detach(device)
        backing_file.unlink()
