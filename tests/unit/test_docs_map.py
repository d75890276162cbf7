"""The docs stay a map: held as tests so they cannot drift unnoticed.

``docs/architecture.md`` is where a reader starts: one paragraph per layer and a
table with one row per module. It is only worth reading while it is whole and
short, and both decay quietly: a new module gets no row, a removed one keeps
its row, and detail accretes in the prose until the page is no longer read.
Detail belongs in each part's own page, and a page nobody links to is a page
nobody finds, so every page under ``docs/`` must be linked from the README or
from the architecture page.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "metalforge"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"

PROSE_LIMIT = 250
"""Lines of the architecture page besides the module table's rows.

The table grows by one row with every module, as it must; the rest of the
page (intro, the layers' paragraphs, further reading) is what must stay short."""

ROW = re.compile(r"^\| `(?P<module>[^`]+\.py)` \| (?P<what>.*) \|$")
"""A row of the module table: ``| `conductor/task.py` | what it is for |``."""

LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
"""The target of a Markdown link, ``[text](target)``."""


def _modules() -> set[str]:
    """Every module the table must list, relative to ``src/metalforge/``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py" or name.startswith("db/migrations/versions/"):
            continue
        found.add(name)
    return found


def _lines() -> list[str]:
    return ARCHITECTURE.read_text(encoding="utf-8").splitlines()


def _rows() -> list[tuple[str, str]]:
    """(module, what it is for) of each row of the module table, in page order."""
    rows = []
    for line in _lines():
        match = ROW.match(line)
        if match:
            rows.append((match["module"], match["what"].strip()))
    return rows


def _linked_docs(page: Path) -> set[Path]:
    """The pages under ``docs/`` that ``page`` links to (anchors and queries dropped)."""
    linked = set()
    for match in LINK.finditer(page.read_text(encoding="utf-8")):
        target = match["target"].split("#", 1)[0].split("?", 1)[0]
        if not target.endswith(".md") or "://" in target:
            continue
        resolved = (page.parent / target).resolve()
        if resolved.parent == DOCS.resolve():
            linked.add(resolved)
    return linked


def test_the_module_table_lists_every_module_and_nothing_else() -> None:
    rows = _rows()
    listed = Counter(module for module, _ in rows)
    modules = _modules()
    problems = {
        "modules with no row (add '| `<module>` | what it is for |')": sorted(
            modules - listed.keys()
        ),
        "rows for modules that are gone": sorted(listed.keys() - modules),
        "modules with more than one row": sorted(m for m, count in listed.items() if count > 1),
        "rows that do not say what the module is for": sorted(m for m, what in rows if not what),
    }
    found = {problem: names for problem, names in problems.items() if names}
    assert not found, f"docs/architecture.md's module table is out of date: {found}"


def test_the_architecture_page_stays_short() -> None:
    lines = _lines()
    prose = len(lines) - len(_rows())
    assert prose <= PROSE_LIMIT, (
        f"docs/architecture.md has {prose} lines besides its module table (at most "
        f"{PROSE_LIMIT}): move the detail to the part's own page and link it"
    )


def test_every_doc_is_linked_from_the_readme_or_the_architecture_page() -> None:
    linked = _linked_docs(ROOT / "README.md") | _linked_docs(ARCHITECTURE)
    pages = {path.resolve() for path in DOCS.glob("*.md")}
    unlinked = sorted(path.name for path in pages - linked - {ARCHITECTURE.resolve()})
    assert not unlinked, f"docs linked from neither README.md nor docs/architecture.md: {unlinked}"
    assert ARCHITECTURE.resolve() in _linked_docs(ROOT / "README.md"), (
        "README.md must link docs/architecture.md, where the other docs are found"
    )
