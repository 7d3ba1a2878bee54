#!/usr/bin/env python3
"""Feeds a neyman daemon over HTTP, without Kafka (README "Feedback without Kafka").

Posts the bundled stream's events (data/streams/spambase.jsonl.gz: labelled spam on the
positive channel, "not spam" feedback on the negative channel, the traffic on the unlabeled
channel) to POST /v1/events/{channel} in their order, in batches of up to 200 of one channel,
with the admin token of $ADMIN_TOKEN. Prints one line per request (channel, events, accepted,
dead-lettered), then the model the daemon trained from them (GET /v1/model).

Usage: ADMIN_TOKEN=... python3 examples/post_events.py [URL] [EVENTS]
(URL default http://127.0.0.1:8787; EVENTS default 3000, the first events of the stream).
Python's standard library only.
"""

import gzip
import itertools
import json
import os
import sys
import time
import urllib.error
import urllib.request

STREAM = os.path.join(os.path.dirname(__file__), "..", "data", "streams", "spambase.jsonl.gz")


def post(url, token, channel, events):
    """POSTs a batch; returns the daemon's answer (accepted, dead_lettered, dead_letters)."""
    request = urllib.request.Request(
        f"{url}/v1/events/{channel}",
        data=("[" + ",".join(events) + "]").encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    while True:
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as e:
            body = e.read().decode()
            if e.code != 503 or "queue is full" not in body:
                sys.exit(f"POST /v1/events/{channel}: {e.code} {body}")
            time.sleep(1)  # the daemon's intake queue is full: retry after a pause


def main():
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8787"
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    token = os.environ.get("ADMIN_TOKEN")
    if not token:
        sys.exit("set ADMIN_TOKEN to the daemon's admin token (http.admin_token_env)")
    with gzip.open(STREAM, "rt") as lines:
        # A recorded-stream line: {"channel", "ts", "key", "payload"}; the payload is the
        # event JSON exactly as a producer would send it.
        records = [json.loads(line) for line in itertools.islice(lines, limit)]
    for channel, run in itertools.groupby(records, key=lambda r: r["channel"]):
        run = [r["payload"] for r in run]
        for start in range(0, len(run), 200):
            answer = post(url, token, channel, run[start : start + 200])
            print(channel, len(run[start : start + 200]), answer["accepted"], answer["dead_lettered"])
    # The first model trains on the training thread; wait for it (at most a minute).
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{url}/v1/model", timeout=10) as answer:
                print(json.dumps(json.load(answer)))
                return
        except urllib.error.HTTPError as e:
            if e.code != 503:
                raise
            time.sleep(0.1)
    sys.exit("no model after a minute")


if __name__ == "__main__":
    main()
