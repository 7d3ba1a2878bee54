#!/usr/bin/env python3
"""An independent Kafka client for neyman's interoperability test (tests/kafka_interop.rs):
Python confluent-kafka, not neyman's Rust rdkafka. Also a usable example of talking to
neyman from Python.

  client.py produce BOOTSTRAP FILE
      FILE has one JSON object per line: {"topic", "key", "value"} (value: the event JSON
      text). Produces them in order, waits for every delivery report, and prints one JSON
      line per message: {"key", "topic", "partition", "offset"}. Exit 1 if any failed.

  client.py consume BOOTSTRAP TOPIC N TIMEOUT_SECONDS
      Reads TOPIC from the beginning with a fresh group until N messages or the timeout, and
      prints one JSON line per message: {"key", "value", "headers", "partition", "offset"}.
"""
import json
import sys
import uuid

from confluent_kafka import Consumer, Producer


def produce(bootstrap, path):
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    reports, failures = [], []

    def delivered(err, msg):
        if err is not None:
            failures.append(str(err))
        else:
            reports.append({"key": msg.key().decode(), "topic": msg.topic(),
                            "partition": msg.partition(), "offset": msg.offset()})

    with open(path, encoding="utf-8") as lines:
        for line in lines:
            m = json.loads(line)
            while True:
                try:
                    producer.produce(m["topic"], key=m["key"], value=m["value"],
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
    producer.flush(60)
    for r in reports:
        print(json.dumps(r))
    if failures:
        print(f"{len(failures)} deliveries failed, e.g. {failures[0]}", file=sys.stderr)
        sys.exit(1)


def consume(bootstrap, topic, n, timeout):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"interop-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    import time
    deadline, seen = time.monotonic() + timeout, 0
    while seen < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            print(f"consume error: {msg.error()}", file=sys.stderr)
            continue
        headers = {k: (v or b"").decode() for k, v in (msg.headers() or [])}
        print(json.dumps({"key": msg.key().decode(), "value": msg.value().decode(),
                          "headers": headers, "partition": msg.partition(),
                          "offset": msg.offset()}))
        seen += 1
    consumer.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["produce"] and len(sys.argv) == 4:
        produce(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["consume"] and len(sys.argv) == 6:
        consume(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    else:
        sys.exit(__doc__)
