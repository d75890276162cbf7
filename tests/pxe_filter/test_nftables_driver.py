"""The firewall driver against the real nft, in a network namespace of its own (root)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from metalforge.pxe_filter.desired import BLOCK_ALL, FilterState
from metalforge.pxe_filter.driver import FilterError
from metalforge.pxe_filter.nftables import NftablesFilter
from tests.pxe_filter.conftest import mac
from tests.support.dhcp_network import require_namespaces


@pytest.fixture
def nft() -> Iterator[list[str]]:
    require_namespaces()
    namespace = f"pfnft{os.getpid()}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        yield ["ip", "netns", "exec", namespace, "nft"]
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)


def _elements(nft: list[str], name: str) -> set[str]:
    listed = subprocess.run(
        [*nft, "-j", "list", "set", "inet", "metalforge_pxe", name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: set[str] = set()
    for entry in json.loads(listed)["nftables"]:
        for element in entry.get("set", {}).get("elem", []):
            value = element["elem"]["val"] if isinstance(element, dict) else element
            found.add(str(value))
    return found


def _rules(nft: list[str]) -> str:
    return subprocess.run(
        [*nft, "list", "chain", "inet", "metalforge_pxe", "denylist"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_leaders_filter_in_sets_with_its_entries_timed(nft: list[str]) -> None:
    driver = NftablesFilter(nft, "eth0")
    driver.start()
    assert _elements(nft, "allow") == set()
    state = FilterState(frozenset({mac(1)}), frozenset({mac(2), mac(3)}), unknown_allowed=True)
    driver.apply(state, repair=True, valid_for=4.0)
    assert _elements(nft, "allow") == {mac(1)}
    assert _elements(nft, "deny") == {mac(2), mac(3)}
    assert _elements(nft, "pass") == {"67"}
    listed = subprocess.run(
        [*nft, "list", "set", "inet", "metalforge_pxe", "allow"], capture_output=True, text=True
    ).stdout
    assert "timeout 4s" in listed  # valid_for  # gone by itself unless the leader renews it
    # The pass rule sits after the deny set's drop, and everything else is dropped.
    rules = _rules(nft)
    assert rules.index("@deny drop") < rules.index("@pass accept") < rules.rindex("drop")


def test_a_change_swaps_the_sets_and_blocking_empties_the_leaders_entries(
    nft: list[str],
) -> None:
    driver = NftablesFilter(nft, "eth0")
    driver.start()
    driver.apply(
        FilterState(frozenset({mac(1)}), frozenset({mac(2)}), True), repair=True, valid_for=4.0
    )
    driver.apply(
        FilterState(frozenset(), frozenset({mac(1), mac(2)}), False), repair=False, valid_for=4.0
    )
    assert _elements(nft, "allow") == set()
    assert _elements(nft, "deny") == {mac(1), mac(2)}
    assert _elements(nft, "pass") == set()
    driver.apply(
        FilterState(frozenset({mac(1)}), frozenset({mac(2)}), True), repair=False, valid_for=4.0
    )
    driver.block()
    assert _elements(nft, "allow") == set()
    assert _elements(nft, "pass") == set()
    assert _elements(nft, "deny") == {mac(2)}


def test_a_deleted_table_is_rebuilt_blocking_then_repaired(nft: list[str]) -> None:
    driver = NftablesFilter(nft, "eth0")
    driver.start()
    state = FilterState(frozenset({mac(1)}), frozenset({mac(2)}), False)
    driver.apply(state, repair=True, valid_for=4.0)
    subprocess.run([*nft, "delete", "table", "inet", "metalforge_pxe"], check=True)
    with pytest.raises(FilterError, match="nft refused"):
        driver.apply(state, repair=False, valid_for=4.0)
    driver.block()
    assert _elements(nft, "allow") == set()
    driver.apply(state, repair=True, valid_for=4.0)
    assert _elements(nft, "allow") == {mac(1)}
    assert _elements(nft, "deny") == {mac(2)}


def test_ten_thousand_macs_in_one_transaction(nft: list[str]) -> None:
    driver = NftablesFilter(nft, "eth0")
    driver.start()
    denied = frozenset(mac(i) for i in range(10_000))
    driver.apply(FilterState(frozenset({mac(10_001)}), denied, False), repair=True, valid_for=4.0)
    assert len(_elements(nft, "deny")) == 10_000
    driver.apply(BLOCK_ALL, repair=True, valid_for=4.0)
    assert _elements(nft, "deny") == set()


def test_a_missing_nft_is_an_error() -> None:
    driver = NftablesFilter(["/nonexistent/nft"], "eth0")
    with pytest.raises(FilterError, match="cannot run"):
        driver.start()
