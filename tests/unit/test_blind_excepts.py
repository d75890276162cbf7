"""A blind except says why on its own line.

``except Exception``, ``except BaseException`` and a bare ``except:`` catch
bugs as well as the failures they were written for. Ruff's BLE001 flags only
those that neither re-raise nor log a traceback; this holds every one of them
in ``src`` to the rule: the ``except`` line carries a comment giving the
reason it must be that broad (or it names the exceptions that can happen).
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
BROAD = frozenset({"Exception", "BaseException"})


def _is_broad(caught: ast.expr | None) -> bool:
    if caught is None:
        return True
    if isinstance(caught, ast.Tuple):
        return any(_is_broad(element) for element in caught.elts)
    if isinstance(caught, ast.Name):
        return caught.id in BROAD
    if isinstance(caught, ast.Attribute):  # builtins.Exception
        return caught.attr in BROAD and isinstance(caught.value, ast.Name)
    return False


def _commented_lines(source: str) -> set[int]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {token.start[0] for token in tokens if token.type == tokenize.COMMENT}


def unexplained(source: str) -> list[int]:
    """The lines of broad handlers in ``source`` whose ``except`` line has no comment."""
    commented = _commented_lines(source)
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ExceptHandler)
        and _is_broad(node.type)
        and node.lineno not in commented
    )


def _broad_handlers() -> dict[str, list[int]]:
    """Every file of ``src`` with a broad handler, and the lines of its broad handlers."""
    found: dict[str, list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ExceptHandler) and _is_broad(node.type):
                found.setdefault(str(path.relative_to(SRC)), []).append(node.lineno)
    return found


def test_the_check_tells_a_reason_from_none() -> None:
    source = (
        "try:\n    pass\n"
        "except Exception:  # the loop outlives any failure\n    pass\n"
        "try:\n    pass\n"
        "except (OSError, BaseException):\n    pass\n"
        "try:\n    pass\n"
        "except:\n    pass\n"
        "try:\n    pass\n"
        "except ValueError:\n    pass\n"
        "try:\n    pass\n"
        "except builtins.Exception:\n    x = '# not a comment'\n"
    )
    assert unexplained(source) == [7, 11, 19]


def test_the_scan_sees_the_broad_handlers() -> None:
    found = _broad_handlers()
    assert "metalforge/conductor/dispatch.py" in found
    assert sum(len(lines) for lines in found.values()) > 20


def test_every_broad_except_in_src_says_why_on_its_line() -> None:
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC)
        missing += [f"{relative}:{n}" for n in unexplained(path.read_text(encoding="utf-8"))]
    assert missing == [], "narrow these, or say on the except line why they must be broad"
