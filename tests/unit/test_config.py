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
    assert settings.conductor.enabled_hardware_types == ["fake-hardware", "ipmi", "redfish"]


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
