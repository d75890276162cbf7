"""The docs stay a map: held as tests so they cannot drift unnoticed.

``docs/architecture.md`` is where a reader starts: one paragraph per layer and a
table with one row per package, each linked to its section of
``docs/modules.md``, which has one line per module. Both are only worth reading
while they are whole, and the architecture page only while it is short, and
all of it decays quietly: a new module or package gets no row, a removed one
keeps its row, and detail accretes in the prose until the page is no longer
read. Detail belongs in each part's own page, and a page nobody links to is a
page nobody finds, so every page under ``docs/`` must be linked from the README
or from the architecture page.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "metalforge"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
MODULES = DOCS / "modules.md"

LINE_LIMIT = 250
"""Lines of the whole architecture page: intro, the layers' paragraphs, the
package table and further reading. The table grows by one row a package, not
one a module, so the page has no reason to grow past this."""

TOP_LEVEL = "top level"
"""The package table's row, and the modules page's section, for the modules
directly in ``src/metalforge/``."""

MODULE_ROW = re.compile(r"^\| `(?P<module>[^`]+\.py)` \| (?P<what>.*) \|$")
"""A row of the module tables: ``| `conductor/task.py` | what it is for |``."""

PACKAGE_ROW = re.compile(
    rf"^\| (?:`(?P<package>[^`]+/)`|(?P<top>{TOP_LEVEL})) \| (?P<what>.*) \| (?P<see>.*) \|$"
)
"""A row of the package table: ``| `conductor/flows/` | what it is for | links |``."""

HEADING = re.compile(r"^#{1,6} (?P<title>.+?)\s*$")
"""A Markdown heading, ``## api/routes/``."""

LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
"""The target of a Markdown link, ``[text](target)``."""


def _modules() -> set[str]:
    """Every module the modules page must list, relative to ``src/metalforge/``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py" or name.startswith("db/migrations/versions/"):
            continue
        found.add(name)
    return found


def _package_of(module: str) -> str:
    """The package table's name for the directory holding ``module``: ``api/routes/``."""
    directory, _, _ = module.rpartition("/")
    return f"{directory}/" if directory else TOP_LEVEL


def _slug(title: str) -> str:
    """The anchor GitHub gives a heading: ``api/routes/`` is ``#apiroutes``."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _lines(page: Path) -> list[str]:
    return page.read_text(encoding="utf-8").splitlines()


def _module_rows() -> list[tuple[str, str, str]]:
    """(section heading, module, what it is for) of each row of the modules page."""
    rows = []
    section = ""
    for line in _lines(MODULES):
        heading = HEADING.match(line)
        if heading:
            section = heading["title"]
        match = MODULE_ROW.match(line)
        if match:
            rows.append((section, match["module"], match["what"].strip()))
    return rows


def _package_rows() -> list[tuple[str, str, str]]:
    """(package, what it is for, links) of each row of the architecture page's table."""
    rows = []
    for line in _lines(ARCHITECTURE):
        match = PACKAGE_ROW.match(line)
        if match:
            package = match["package"] or TOP_LEVEL
            rows.append((package, match["what"].strip(), match["see"]))
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


def test_the_modules_page_lists_every_module_and_nothing_else() -> None:
    rows = _module_rows()
    listed = Counter(module for _, module, _ in rows)
    modules = _modules()
    problems = {
        "modules with no row (add '| `<module>` | what it is for |')": sorted(
            modules - listed.keys()
        ),
        "rows for modules that are gone": sorted(listed.keys() - modules),
        "modules with more than one row": sorted(m for m, count in listed.items() if count > 1),
        "rows that do not say what the module is for": sorted(m for _, m, what in rows if not what),
        "rows under another package's heading": sorted(
            m for section, m, _ in rows if section != _package_of(m)
        ),
    }
    found = {problem: names for problem, names in problems.items() if names}
    assert not found, f"docs/modules.md is out of date: {found}"


def test_the_package_table_lists_every_package_and_nothing_else() -> None:
    rows = _package_rows()
    listed = Counter(package for package, _, _ in rows)
    packages = {_package_of(module) for module in _modules()}
    problems = {
        "packages with no row (add '| `<package>/` | what it is for | links |')": sorted(
            packages - listed.keys()
        ),
        "rows for packages that are gone": sorted(listed.keys() - packages),
        "packages with more than one row": sorted(p for p, count in listed.items() if count > 1),
        "rows that do not say what the package is for": sorted(
            p for p, what, _ in rows if not what
        ),
        "rows with no link to their section of modules.md": sorted(
            p for p, _, see in rows if f"(modules.md#{_slug(p)})" not in see
        ),
    }
    found = {problem: names for problem, names in problems.items() if names}
    assert not found, f"docs/architecture.md's package table is out of date: {found}"


def test_every_section_the_architecture_page_links_to_exists() -> None:
    broken = []
    for match in LINK.finditer(ARCHITECTURE.read_text(encoding="utf-8")):
        target, _, anchor = match["target"].partition("#")
        if not anchor or "://" in target or not target.endswith(".md"):
            continue
        headings = {
            _slug(heading["title"])
            for heading in map(HEADING.match, _lines(ARCHITECTURE.parent / target))
            if heading
        }
        if anchor not in headings:
            broken.append(match["target"])
    assert not broken, f"docs/architecture.md links to sections that are not there: {broken}"


def test_the_architecture_page_stays_short() -> None:
    length = len(_lines(ARCHITECTURE))
    assert length <= LINE_LIMIT, (
        f"docs/architecture.md has {length} lines (at most {LINE_LIMIT}): move the "
        "detail to the part's own page and link it"
    )


def test_every_doc_is_linked_from_the_readme_or_the_architecture_page() -> None:
    linked = _linked_docs(ROOT / "README.md") | _linked_docs(ARCHITECTURE)
    pages = {path.resolve() for path in DOCS.glob("*.md")}
    unlinked = sorted(path.name for path in pages - linked - {ARCHITECTURE.resolve()})
    assert not unlinked, f"docs linked from neither README.md nor docs/architecture.md: {unlinked}"
    assert ARCHITECTURE.resolve() in _linked_docs(ROOT / "README.md"), (
        "README.md must link docs/architecture.md, where the other docs are found"
    )
    assert MODULES.resolve() in _linked_docs(ARCHITECTURE), (
        "docs/architecture.md must link docs/modules.md, where its packages' modules are"
    )
