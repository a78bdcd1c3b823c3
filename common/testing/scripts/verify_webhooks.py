"""Verifies recorded deliveries with the Standard Webhooks reference library
for Python (`standardwebhooks` from PyPI), which cronshard did not write.

    verify_webhooks.py SECRET [SHIFT_SECONDS] < requests.jsonl

Each input line is {"headers": {name: value}, "body_b64": "..."}; each output
line is "ok" or "refused: <why>". SHIFT_SECONDS moves the verifier's clock
(a replay checked later than it was sent).
"""

import base64
import datetime
import json
import sys

import standardwebhooks.webhooks as webhooks
from standardwebhooks import Webhook

secret = sys.argv[1]
shift = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0

if shift:

    class Shifted(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime.now(tz) + datetime.timedelta(seconds=shift)

    # The library reads its clock through the name it imported.
    webhooks.datetime = Shifted

verifier = Webhook(secret)
for line in sys.stdin:
    request = json.loads(line)
    body = base64.b64decode(request["body_b64"])
    try:
        verifier.verify(body, request["headers"], json_parse=False)
        print("ok")
    except Exception as e:  # the library's refusals name what failed
        print(f"refused: {e}")
