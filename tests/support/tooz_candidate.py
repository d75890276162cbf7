"""A process campaigning for one role through metalforge's tooz elector, for tests.

``python -m tests.support.tooz_candidate URL NAME`` prints ``leads`` or
``follows`` (flushed) whenever its standing changes, and campaigns every
tenth of a second until killed. Only a real process can be killed the way a
crashed conductor is.
"""

from __future__ import annotations

import sys
import time

from metalforge.conductor.leadership import ToozElector

ROLE = "inspection-timeouts"


def main() -> None:
    url, name = sys.argv[1], sys.argv[2]
    elector = ToozElector(url, name, "metalforge-test", timeout=5.0)
    elector.start()
    leading: bool | None = None
    while True:
        now = elector.campaign(ROLE)
        if now != leading:
            print("leads" if now else "follows", flush=True)
            leading = now
        time.sleep(0.1)


if __name__ == "__main__":
    main()
