"""River's prequential loop on a neyman recorded stream: the issue-20 throughput baseline.

What `neyman replay --baseline online-lr` runs (src/daemon/baseline.rs), written with River
itself: `StandardScaler | LogisticRegression` (SGD, learning rate 0.01) learns from the
positive and negative channels as their events arrive (a negative is scored first and its
score enters a `RollingQuantile` of the last WINDOW negatives' scores), and every unlabeled
event is flagged when its score is above that (1 - tau) quantile. `--no-scaler` drops the
online standardisation (River's bare `LogisticRegression`, several times faster and far
worse on unscaled features). Reading and parsing the JSON lines is timed with the loop, as
the daemon's replay reads and parses them.

    python -m pip install river==0.26.1
    python benches/river_prequential.py STREAM.jsonl.gz [--tau 0.05] [--window 1000]
        [--limit N] [--no-scaler]

Prints one JSON object: events, seconds, events_per_s and the prequential totals over the
unlabeled events that carry their truth in meta.label (fpr, tpr; docs/benchmarks.md).
"""

import argparse
import gzip
import json
import time

from river import linear_model, optim, preprocessing, stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stream")
    parser.add_argument("--tau", type=float, default=0.05)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--no-scaler", action="store_true")
    args = parser.parse_args()

    model = linear_model.LogisticRegression(optimizer=optim.SGD(0.01))
    if not args.no_scaler:
        model = preprocessing.StandardScaler() | model
    quantile = stats.RollingQuantile(q=1 - args.tau, window_size=args.window)
    learned = negatives_seen = False
    events = flagged_pos = flagged_neg = pos = neg = 0
    opener = gzip.open if args.stream.endswith(".gz") else open
    started = time.perf_counter()
    with opener(args.stream, "rt") as lines:
        for line in lines:
            record = json.loads(line)
            event = json.loads(record["payload"])
            x = dict(enumerate(event["x"]))
            channel = record["channel"]
            if channel == "unlabeled":
                if learned and negatives_seen:
                    flag = model.predict_proba_one(x).get(True, 0.0) > quantile.get()
                    label = (event.get("meta") or {}).get("label")
                    if label == 1:
                        pos += 1
                        flagged_pos += flag
                    elif label == -1:
                        neg += 1
                        flagged_neg += flag
            else:
                positive = channel == "positive"
                if not positive:
                    quantile.update(model.predict_proba_one(x).get(True, 0.0))
                    negatives_seen = True
                model.learn_one(x, positive)
                learned = True
            events += 1
            if args.limit is not None and events >= args.limit:
                break
    seconds = time.perf_counter() - started
    print(json.dumps({
        "baseline": "river " + ("LogisticRegression" if args.no_scaler else "StandardScaler | LogisticRegression"),
        "events": events,
        "seconds": round(seconds, 3),
        "events_per_s": round(events / seconds),
        "fpr": flagged_neg / neg if neg else None,
        "tpr": flagged_pos / pos if pos else None,
    }))


if __name__ == "__main__":
    main()
