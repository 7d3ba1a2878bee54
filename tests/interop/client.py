#!/usr/bin/env python3
"""An independent Kafka client for neyman's interoperability test (tests/kafka_interop.rs):
Python confluent-kafka (its own bundled librdkafka), not neyman's Rust rdkafka. Also a small
example of feeding neyman events and reading its scores from Python.

  client.py produce BOOTSTRAP STREAM [LIMIT]
      STREAM is a recorded stream (docs/record.schema.json: JSON Lines, gzip'd when the name
      ends in .gz), e.g. data/streams/spambase.jsonl.gz. Produces its first LIMIT lines (all
      without LIMIT) in order to the topic of their channel (neyman.positive,
      neyman.unlabeled, neyman.negative: config/kafka.toml), key = the line's key, value =
      its payload, headers kept; waits for every delivery report and prints one JSON line per
      message in file order: {"key", "topic", "partition", "offset"}. Exit 1 if any failed.

  client.py consume BOOTSTRAP TOPIC N TIMEOUT_SECONDS
      Reads TOPIC from the beginning with a fresh consumer group until N messages, the end of
      every partition, or the timeout, and prints one JSON line per message: {"key", "value",
      "headers", "partition", "offset"} (headers as an object; a valueless header as "").
"""
import base64
import gzip
import json
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer


def records(path, limit):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for i, line in enumerate(lines):
            if limit is not None and i >= limit:
                return
            yield json.loads(line)


def produce(bootstrap, path, limit):
    # Idempotent: a retried send cannot duplicate or reorder, so the offsets the delivery
    # reports give are the ones the daemon reads.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    reports, failures = [], []

    def delivered(err, msg, index):
        if err is not None:
            failures.append(str(err))
        else:
            reports.append((index, {"key": msg.key().decode() if msg.key() is not None else None,
                                    "topic": msg.topic(), "partition": msg.partition(),
                                    "offset": msg.offset()}))

    for index, rec in enumerate(records(path, limit)):
        value = (rec["payload"].encode() if "payload" in rec
                 else base64.b64decode(rec["payload_b64"]))
        headers = [(k, v.encode()) for k, v in rec.get("headers", [])]
        while True:
            try:
                producer.produce(f"neyman.{rec['channel']}", key=rec.get("key"), value=value,
                                 headers=headers,
                                 on_delivery=lambda err, msg, i=index: delivered(err, msg, i))
                break
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    for _, report in sorted(reports, key=lambda r: r[0]):
        print(json.dumps(report))
    if failures or remaining:
        print(f"{len(failures)} deliveries failed ({failures[:1]}), {remaining} unanswered",
              file=sys.stderr)
        sys.exit(1)


def consume(bootstrap, topic, n, timeout):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"interop-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "enable.partition.eof": True})
    consumer.subscribe([topic])
    deadline, seen, at_end = time.monotonic() + timeout, 0, set()
    while seen < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                # Read to the end: stop once every assigned partition is, rather than wait for
                # messages nobody produces.
                at_end.add(msg.partition())
                if at_end >= {p.partition for p in consumer.assignment()}:
                    break
            else:
                print(f"consume error: {msg.error()}", file=sys.stderr)
            continue
        at_end.discard(msg.partition())
        headers = {k: (v or b"").decode() for k, v in (msg.headers() or [])}
        print(json.dumps({"key": msg.key().decode() if msg.key() is not None else None,
                          "value": msg.value().decode(), "headers": headers,
                          "partition": msg.partition(), "offset": msg.offset()}))
        seen += 1
    if seen < n and time.monotonic() >= deadline:
        print(f"timed out after {timeout} s with {seen} of {n} messages", file=sys.stderr)
    consumer.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["produce"] and len(args) in (3, 4):
        produce(args[1], args[2], int(args[3]) if len(args) == 4 else None)
    elif args[:1] == ["consume"] and len(args) == 5:
        consume(args[1], args[2], int(args[3]), float(args[4]))
    else:
        sys.exit(__doc__)
