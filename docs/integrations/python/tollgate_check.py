#!/usr/bin/env python3
"""Ask Tollgate whether a batch may go on, from any Python integration (standard library only).

    python3 tollgate_check.py URL METERING_ID LIMIT RECORDS REQUEST_ID

prints one line and exits with its code:
    forward              0   the quota admits the batch: send it on
    hold SECONDS         3   over quota: keep the batch and retry after SECONDS
    forward (fail-open)  0   Tollgate did not answer in time, or failed: send it on anyway

The metering id names the partner and the document type ("ShipmentStatus:CarrierXYZ"); the
weight is the batch's record count; the request id is the message's own id (for SAP PI/CPI the
message id), so a retry of the same message is not counted twice.
"""
import sys
import urllib.error
import urllib.request

# Short enough that a slow or dead Tollgate never holds up the pipeline: fail open after it.
TIMEOUT_S = 2.0


def check(url, metering_id, limit, records, request_id, interval=24, unit="hours"):
    """Returns ("forward", None), ("hold", retry_after_seconds) or ("fail-open", reason)."""
    req = urllib.request.Request(
        url.rstrip("/") + "/v1/quota",
        headers={
            "metering-id": metering_id,
            "quota-limit": str(limit),
            "quota-interval": str(interval),
            "quota-timeunit": unit,
            "message-weight": str(records),
            "quota-request-id": request_id,
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as res:
            return ("forward", None) if res.status == 200 else ("fail-open", f"status {res.status}")
    except urllib.error.HTTPError as e:
        if e.code == 429:
            return ("hold", int(e.headers.get("Retry-After", "60")))
        return ("fail-open", f"status {e.code}")
    except (urllib.error.URLError, OSError) as e:  # refused, timed out, reset
        return ("fail-open", str(e))


def main(argv):
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    url, metering_id, limit, records, request_id = argv[1:]
    verdict, detail = check(url, metering_id, int(limit), int(records), request_id)
    if verdict == "hold":
        print(f"hold {detail}")
        return 3
    print("forward" if verdict == "forward" else f"forward (fail-open: {detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
