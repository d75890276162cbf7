"""A process campaigning for one role through metalforge's tooz elector, for tests.

``python -m tests.support.tooz_candidate URL NAME DB_URL`` prints ``leads
EPOCH`` or ``follows`` (flushed) whenever its standing changes, and
campaigns every tenth of a second until killed; its terms' epochs go to the
database at ``DB_URL`` (already upgraded). Only a real process can be killed the way a
crashed conductor is.
"""

from __future__ import annotations

import sys
import time

from metalforge.coordination.election import EpochLedger, ToozElector
from metalforge.db.engine import Database

ROLE = "inspection-timeouts"


def main() -> None:
    url, name, db_url = sys.argv[1], sys.argv[2], sys.argv[3]
    elector = ToozElector(url, name, "metalforge-test", 5.0, EpochLedger(Database(db_url), 5.0))
    elector.start()
    standing: str | None = None
    while True:
        epoch = elector.campaign(ROLE)
        now = "follows" if epoch is None else f"leads {epoch}"
        if now != standing:
            print(now, flush=True)
            standing = now
        time.sleep(0.1)


if __name__ == "__main__":
    main()
