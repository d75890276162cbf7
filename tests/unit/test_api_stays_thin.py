"""The API parses, authorizes, calls a service and renders: its functions stay short.

What a request does lives in ``metalforge.services``; a long function in
``metalforge.api`` is where business rules start to gather again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import metalforge.api

API = Path(metalforge.api.__file__).parent
LONGEST = 40


def _functions() -> list[tuple[str, int]]:
    found = []
    for path in sorted(API.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                found.append((f"{path.relative_to(API)}:{node.name}", length))
    return found


def test_the_scan_sees_the_routes() -> None:
    names = {name for name, _ in _functions()}
    assert "routes/node_states.py:set_provision_state" in names


def test_no_api_function_is_longer_than_40_lines() -> None:
    too_long = [(name, n) for name, n in _functions() if n > LONGEST]
    assert too_long == []
