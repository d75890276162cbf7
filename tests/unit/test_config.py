"""Settings: TOML file, environment overrides, validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from metalforge.config import load_settings


def test_defaults_are_the_embedded_setup() -> None:
    settings = load_settings()
    assert settings.api.host == "127.0.0.1"
    assert settings.api.port == 6385
    assert settings.database.url.startswith("sqlite:///")
    assert settings.conductor.enabled_hardware_types == [
        "fake-hardware",
        "ipmi",
        "redfish",
        "idrac",
        "manual-management",
    ]


def test_the_embedded_database_lives_in_the_state_directory(tmp_path: Path) -> None:
    assert load_settings().database.url == "sqlite:///var/metalforge.sqlite"
    moved = load_settings(state_dir=tmp_path / "state")
    assert moved.database.url == f"sqlite:///{tmp_path}/state/metalforge.sqlite"
    chosen = load_settings(state_dir=tmp_path, database={"url": "sqlite:///elsewhere.db"})
    assert chosen.database.url == "sqlite:///elsewhere.db"


def test_settings_nothing_reads_are_refused(tmp_path: Path) -> None:
    """``api.workers`` was documented but never read: it is gone, and naming it is an error,
    as is any mistyped key of a section (it was silently ignored)."""
    with pytest.raises(ValidationError):
        load_settings(api={"workers": 4})
    config = tmp_path / "typo.toml"
    config.write_text("[conductor]\nheartbeat_intervall = 1.0\n")
    with pytest.raises(ValidationError, match="heartbeat_intervall"):
        load_settings(config)


def test_file_then_environment_then_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "metalforge.toml"
    config.write_text("[api]\nport = 7000\nmax_limit = 50\n[conductor]\nworkers = 3\n")
    monkeypatch.setenv("METALFORGE_API__PORT", "7001")
    settings = load_settings(config, conductor={"workers": 5})
    assert settings.api.port == 7001  # the environment beats the file
    assert settings.api.max_limit == 50  # the file beats the default
    assert settings.conductor.workers == 5  # arguments beat everything


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "nope.toml")


def test_unknown_keys_and_bad_overrides_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("typo_key = 1\n")
    with pytest.raises(ValidationError):
        load_settings(config)
    with pytest.raises(ValidationError, match=r"interface\.step:priority"):
        load_settings(conductor={"clean_step_priority_override": ["erase_devices=0"]})
    with pytest.raises(ValidationError, match=r"interface\.step:priority"):
        load_settings(conductor={"deploy_step_priority_override": ["deploy.deploy:-1"]})


def test_step_priority_overrides_are_parsed_once_when_the_settings_load(tmp_path: Path) -> None:
    config = tmp_path / "metalforge.toml"
    config.write_text(
        "[conductor]\n"
        "clean_step_priority_override = "
        '["deploy.erase_devices:0", "raid.create_configuration:20"]\n'
    )
    conductor = load_settings(config).conductor
    assert conductor.clean_step_priority_override == {
        "deploy.erase_devices": 0,
        "raid.create_configuration": 20,
    }
    assert conductor.deploy_step_priority_override == {}
