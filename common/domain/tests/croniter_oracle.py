"""Answers cron queries with Python's croniter, for common/domain/tests/cron_oracle.rs.

Reads one JSON query per line on stdin:
    {"expr": "<croniter syntax>", "start": "YYYY-MM-DDTHH:MM:SS", "n": 6}
and writes one JSON answer per line on stdout:
    {"fires": ["YYYY-MM-DDTHH:MM:SS", ...], "exhausted": false}
the next n naive wall times strictly after start. "exhausted" is true when
croniter found no further fire within its 50-year search window; "error"
replaces both when croniter refuses the expression.

Naive datetimes: the expression's semantics only, no time zone.
"""

import json
import sys
from datetime import datetime

from croniter import CroniterBadDateError, croniter


def answer(query):
    start = datetime.fromisoformat(query["start"])
    try:
        # day_or: a day matches either restricted day field (crontab).
        # implement_cron_bug: a day field starting with "*" restricts by AND
        # (Vixie cron), as cronshard does. Seconds come first in 6 fields.
        it = croniter(
            query["expr"],
            start,
            day_or=True,
            implement_cron_bug=True,
            second_at_beginning=True,
        )
    except Exception as e:  # noqa: BLE001 - any refusal is the answer
        return {"error": f"{type(e).__name__}: {e}"}
    fires = []
    try:
        for _ in range(query["n"]):
            fires.append(it.get_next(datetime).isoformat())
    except CroniterBadDateError:
        return {"fires": fires, "exhausted": True}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}
    return {"fires": fires, "exhausted": False}


def main():
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(answer(json.loads(line))))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
