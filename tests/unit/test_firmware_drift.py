"""The rules that place a node's firmware against a baseline."""

from __future__ import annotations

import pytest

from metalforge.firmware_drift import (
    DIFFERS,
    OLDER,
    UNKNOWN,
    Drift,
    Recorded,
    covers,
    drift,
    status,
    tally,
    version_key,
)


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("2.9.1", "2.10.0"),
        ("1.2", "1.2.1"),
        ("U46 v1.98", "U46 v2.02"),
        ("7.00.00.00", "7.10.50.00"),
        ("1.0.0", "1.0.0a"),
        ("1.0a", "1.0b"),
        ("A.01", "A.1.1"),
    ],
)
def test_versions_sort_by_their_numbers_not_their_characters(lower: str, higher: str) -> None:
    assert version_key(lower) < version_key(higher)
    assert status(lower, higher) == OLDER
    assert status(higher, lower) == DIFFERS


def test_case_and_separators_do_not_make_a_version_newer() -> None:
    assert version_key("2.1.0-RC1") == version_key("2_1_0 rc1")
    assert status("2.1.0-rc1", "2.1.0-RC1") == DIFFERS, "the same order, not the same string"


@pytest.mark.parametrize("current", [None, "", "   "])
def test_no_recorded_version_is_unknown(current: str | None) -> None:
    assert status(current, "1.0") == UNKNOWN


def test_the_same_version_is_not_drift() -> None:
    assert status(" 1.0.1 ", "1.0.1") is None


def test_a_baseline_for_no_vendor_covers_every_node_even_one_that_reported_nothing() -> None:
    assert covers(None, None, [])


def test_vendor_and_model_are_matched_on_one_component_without_case() -> None:
    bios = Recorded("bios", "1.0", "Dell Inc.", "PowerEdge R650")
    bmc = Recorded("bmc", "7.0", "Dell", None)
    assert covers("dell inc.", "poweredge r650 ", [bmc, bios])
    assert covers("Dell", None, [bmc, bios])
    assert not covers("Dell", "PowerEdge R650", [bmc])
    assert not covers("Contoso", None, [bmc, bios])
    assert not covers("Dell Inc.", None, [])


def test_drift_lists_components_off_the_baseline_in_its_order() -> None:
    recorded = {
        "bios": Recorded("bios", "1.0", None, None),
        "bmc": Recorded("bmc", "3.0", None, None),
    }
    found = drift({"bmc": "3.0", "bios": "1.1", "nic": "2"}, recorded)
    assert found == [Drift("bios", "1.1", "1.0", OLDER), Drift("nic", "2", None, UNKNOWN)]
    assert tally([found, [Drift("bios", "1.1", "1.2", DIFFERS)], found]) == {
        ("bios", OLDER): 2,
        ("nic", UNKNOWN): 2,
        ("bios", DIFFERS): 1,
    }
