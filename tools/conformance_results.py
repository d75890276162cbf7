"""The outcome of every test in a tempest subunit stream, as JSON (for tools/conformance.py).

Runs with the tempest virtualenv's Python (``.tempest-venv/bin/python``),
which has python-subunit and testtools; metalforge's own virtualenv has
neither. Prints one JSON list on standard output: for each test that ended,
its id (as tempest names it, with the ``[id-...]`` suffix), its status
(``success``, ``fail``, ``skip``, ``xfail``, ``uxsuccess``) and its details
(the traceback of a failure, the reason of a skip; none for a success), as text.

Usage: ``python tools/conformance_results.py RESULTS.subunit``
"""

from __future__ import annotations

import json
import sys
from typing import Any

import subunit
import testtools

ENDED = ("success", "fail", "skip", "xfail", "uxsuccess")


def outcomes(path: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def on_test(test: dict[str, Any]) -> None:
        if test["status"] not in ENDED:
            return
        details = {}
        for name, content in test["details"].items() if test["status"] != "success" else ():
            text = "".join(
                bytes(chunk).decode("utf-8", "replace") for chunk in content.iter_bytes()
            )
            if text.strip():
                details[name] = text
        found.append({"id": test["id"], "status": test["status"], "details": details})

    result = testtools.StreamToDict(on_test)
    with open(path, "rb") as stream:
        case = subunit.ByteStreamToStreamResult(stream, non_subunit_name="stdout")
        result.startTestRun()
        try:
            case.run(result)
        finally:
            result.stopTestRun()
    return found


def main() -> None:
    json.dump(outcomes(sys.argv[1]), sys.stdout)


if __name__ == "__main__":
    main()
