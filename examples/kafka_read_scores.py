#!/usr/bin/env python3
"""Prints the scores neyman has written to its scores topic, one per line: the event id (the
message key), the headers as JSON, and the score JSON. Reads every partition from the start
to its end, then exits; --follow keeps reading new scores until Ctrl-C. It reads by assigning partitions, without joining a consumer group, so it
starts at once and commits nothing. Needs confluent-kafka (pip install confluent-kafka).

    python3 examples/kafka_read_scores.py [--bootstrap 127.0.0.1:9092] [--topic neyman.scores] [--follow]
"""
import argparse
import json
import os
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the broker (host:port)")
    parser.add_argument("--topic", default="neyman.scores", help="output.scores_topic")
    parser.add_argument("--follow", action="store_true", help="keep reading new scores")
    args = parser.parse_args()

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "neyman-example",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         # Connection errors become one message below, not a log line per retry.
                         "log_level": 0})
    try:
        topic = consumer.list_topics(args.topic, timeout=10).topics[args.topic]
    except KafkaException as e:
        sys.exit(f"cannot reach {args.bootstrap}: {e}")
    if topic.error is not None:
        sys.exit(f"topic {args.topic} on {args.bootstrap}: {topic.error.str()}")
    partitions = sorted(topic.partitions)
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
    # Without --follow, reading stops once every partition has reported its end.
    pending, read = set(partitions), 0
    try:
        while args.follow or pending:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                    continue
                sys.exit(f"reading {args.topic}: {msg.error().str()}")
            headers = {k: (v or b"").decode() for k, v in (msg.headers() or [])}
            key = msg.key().decode() if msg.key() is not None else ""
            print(key, json.dumps(headers), msg.value().decode(), sep="\t", flush=True)
            read += 1
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        # Piped into `head`: the reader is gone, which ends this quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        consumer.close()
    print(f"{read} scores read from {args.topic}", file=sys.stderr)


if __name__ == "__main__":
    main()
