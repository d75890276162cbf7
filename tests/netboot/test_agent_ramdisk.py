"""The agent ramdisk's build: its archive, its scripts and when it rebuilds.

The whole build (Debian packages and PyPI, about 90 s) runs once before the
suite (``make test-ramdisk``), and the virtual machines of
``test_vm_lifecycle_*`` boot what it made; here are its parts on small inputs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from metalforge_lab import agent_ramdisk
from metalforge_lab.agent_ramdisk import EPOCH, AgentRamdisk, RamdiskError


def _needs(*programs: str) -> None:
    lacking = [program for program in programs if shutil.which(program) is None]
    if lacking and os.environ.get("CI"):
        pytest.fail(f"CI installs {lacking} (tools/ensure-system-packages.sh)")
    if lacking:
        pytest.skip(f"{lacking} not installed")


def _tree(root: Path) -> None:
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/tool").write_text("#!/bin/sh\n")
    (root / "usr/bin/tool").chmod(0o755)
    (root / "bin").symlink_to("usr/bin")  # merged /usr, as Debian 12 has it
    (root / "etc").mkdir()
    (root / "etc/hostname").write_text("agent\n")


def _listing(archive: Path) -> list[str]:
    unpacked = subprocess.run(["zstd", "-dc", str(archive)], capture_output=True, check=True)
    listed = subprocess.run(
        ["cpio", "-t", "-v", "--quiet"], input=unpacked.stdout, capture_output=True, check=True
    )
    return listed.stdout.decode().splitlines()


def test_the_archive_holds_every_entry_with_links_to_directories_in_name_order(
    tmp_path: Path,
) -> None:
    _needs("cpio", "zstd")
    root = tmp_path / "root"
    _tree(root)
    agent_ramdisk._archive(root, tmp_path / "initramfs")
    lines = _listing(tmp_path / "initramfs")
    names = [line.split()[-1] if " -> " not in line else line.split()[-3] for line in lines]
    assert names == [".", "bin", "etc", "etc/hostname", "usr", "usr/bin", "usr/bin/tool"]
    link = next(line for line in lines if " bin -> " in line)
    assert link.startswith("l")
    assert link.endswith("bin -> usr/bin")
    assert next(line for line in lines if line.endswith("usr/bin/tool")).startswith("-rwxr-xr-x")
    for path in (root / "etc/hostname", root / "bin", root):
        assert os.lstat(path).st_mtime == EPOCH


def test_the_same_tree_gives_the_same_bytes(tmp_path: Path) -> None:
    _needs("cpio", "zstd")
    archives = []
    for attempt in ("first", "second"):
        root = tmp_path / attempt / "root"
        _tree(root)
        agent_ramdisk._archive(root, tmp_path / attempt / "initramfs")
        archives.append((tmp_path / attempt / "initramfs").read_bytes())
    assert archives[0] == archives[1]


def test_the_init_and_power_scripts_are_valid_shell(tmp_path: Path) -> None:
    _needs("sh")
    for name, script in (("init", agent_ramdisk._INIT), ("poweroff", agent_ramdisk._POWER)):
        (tmp_path / name).write_text(script)
        checked = subprocess.run(["sh", "-n", str(tmp_path / name)], capture_output=True)
        assert checked.returncode == 0, (name, checked.stderr)
    assert "ironic_python_agent.cmd.agent" in agent_ramdisk._INIT
    assert "echo o > /proc/sysrq-trigger" in agent_ramdisk._POWER.format(key="o")


def test_a_ramdisk_of_the_same_recipe_is_reused_and_another_is_not(tmp_path: Path) -> None:
    made = AgentRamdisk(
        tmp_path / "agent.kernel", tmp_path / "agent.initramfs", tmp_path / "agent-ramdisk.json"
    )
    made.kernel.write_bytes(b"kernel")
    made.initramfs.write_bytes(b"initramfs")
    made.manifest.write_text(json.dumps({"recipe": agent_ramdisk.recipe("cloud")}))
    assert agent_ramdisk.build(tmp_path, kernel="cloud") == made  # nothing rebuilt
    assert agent_ramdisk.recipe("cloud") != agent_ramdisk.recipe("generic")
    assert agent_ramdisk._built(made, agent_ramdisk.recipe("cloud"))
    assert not agent_ramdisk._built(made, agent_ramdisk.recipe("generic"))
    made.manifest.write_text("{not json")
    assert not agent_ramdisk._built(made, agent_ramdisk.recipe("cloud"))


def test_an_unknown_kernel_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(RamdiskError, match="kernel must be one of"):
        agent_ramdisk.build(tmp_path / "out", kernel="rt")
    assert not (tmp_path / "out").exists()


def test_a_failing_step_names_itself_and_what_it_printed() -> None:
    with pytest.raises(RamdiskError, match=r"step one failed \(status 3\): said why"):
        agent_ramdisk._run("step one", ["sh", "-c", "echo said why >&2; exit 3"], timeout=30)
    with pytest.raises(RamdiskError, match="no-such-program is not installed"):
        agent_ramdisk._run("step two", ["no-such-program"], timeout=30)


def test_a_build_is_refused_without_root_or_its_tools_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(RamdiskError, match="needs root"):
        agent_ramdisk.build(tmp_path / "out", kernel="cloud")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(RamdiskError, match="install the Debian packages mmdebstrap, cpio, zstd"):
        agent_ramdisk.build(tmp_path / "out", kernel="cloud")
    assert not (tmp_path / "out").exists()
