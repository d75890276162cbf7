"""Size and shape budgets, held as tests so they cannot drift unnoticed.

A module over 600 lines holds more than one idea more often than not; the few that
are one idea (a schema, a family of contracts) are listed below with the reason and a
ceiling, so they cannot grow without someone deciding it here. The tools are scripts
that import each other from ``tools/``: they may not import in a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600

ALLOWED: dict[str, tuple[int, str]] = {
    "src/metalforge/db/models.py": (980, "the schema: one class per table, read as one"),
    "src/metalforge/drivers/base.py": (
        870,
        "the contract of every interface family, each a short class beside the others",
    ),
    "src/metalforge/drivers/fake.py": (
        900,
        "fake-hardware: one small in-memory implementation of every family, for tests",
    ),
    "src/metalforge/config.py": (800, "every setting with its default and its reason, by role"),
    "src/metalforge_lab/demo.py": (880, "the demo's one script, step by step as printed"),
    "src/metalforge/netboot/images.py": (
        700,
        "image fetching, checksums and conversion: one streaming pipeline",
    ),
    "tools/conformance.py": (620, "one script: Keystone, the service, tempest, the report"),
}
"""Modules allowed past the limit: (ceiling in lines, why it is one piece)."""


def _sources() -> list[Path]:
    found = [*ROOT.joinpath("src").rglob("*.py"), *ROOT.joinpath("tools").glob("*.py")]
    found += ROOT.joinpath("src").rglob("*.js")
    return [path for path in found if "ramdisk/" not in path.as_posix()]


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_its_budget() -> None:
    over = {}
    for path in _sources():
        name = path.relative_to(ROOT).as_posix()
        ceiling = ALLOWED.get(name, (LIMIT, ""))[0]
        if _lines(path) > ceiling:
            over[name] = _lines(path)
    assert not over, f"modules over their budget ({LIMIT} lines unless listed): {over}"


def test_the_allow_list_has_no_stale_entries() -> None:
    """An entry for a module back under the limit (or gone) is removed, not kept for later."""
    stale = [
        name for name in ALLOWED if not ROOT.joinpath(name).exists() or _lines(ROOT / name) <= LIMIT
    ]
    assert not stale, f"allowed past the limit but no longer past it: {stale}"


def _tool_imports(path: Path, tools: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in tools}
        elif isinstance(node, ast.ImportFrom) and node.module in tools and node.level == 0:
            found.add(node.module)
    return found


def test_the_tools_import_no_circle() -> None:
    paths = {path.stem: path for path in ROOT.joinpath("tools").glob("*.py")}
    graph = {name: _tool_imports(path, set(paths)) for name, path in paths.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start]:
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    circles = sorted(name for name in graph if reaches(name, name, {name}))
    assert not circles, f"tools that import themselves through others: {circles}"
