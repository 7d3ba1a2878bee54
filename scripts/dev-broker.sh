#!/usr/bin/env bash
# A Kafka-protocol broker for the quickstart: tansu (fetched and checked by scripts/tansu.sh,
# the same pinned binary the tests use) on 127.0.0.1:9092, or on the port given as the first
# argument, keeping messages in memory (they are gone when it stops). Runs in the foreground
# until Ctrl-C; `bash scripts/dev-broker.sh &` puts it in the background.
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-9092}"
tansu="$(bash scripts/tansu.sh)"
echo "tansu broker on 127.0.0.1:$port (in memory; Ctrl-C stops it)" >&2
exec "$tansu" broker --listener-url "tcp://127.0.0.1:$port" \
  --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine memory://tansu/
