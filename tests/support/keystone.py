"""The Keystone harness (``metalforge_lab.keystone``) as tests use it.

Without Keystone's virtualenv a test that needs it is skipped, except in CI,
where it fails: CI must prove token validation against the real thing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metalforge_lab import keystone as lab
from metalforge_lab.keystone import Keystone

IN_CI = bool(os.environ.get("CI"))


def require_keystone() -> None:
    """Fail in CI, skip elsewhere, when Keystone's virtualenv is not built."""
    reason = lab.missing_keystone()
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"CI must run Keystone: {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def running_keystone(tmp_path: Path, **options: Any) -> Iterator[Keystone]:
    """``metalforge_lab.keystone.running_keystone``, skipped (failed in CI) without Keystone."""
    require_keystone()
    with lab.running_keystone(tmp_path, **options) as keystone:
        yield keystone
