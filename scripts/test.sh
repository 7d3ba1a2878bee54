#!/usr/bin/env bash
# The full test suite, with everything it needs installed first. README's second command;
# .ci/run calls it. Installs: promtool (Debian `prometheus`, for the metrics lint test and the
# alert-rule unit tests) when missing. The Kafka broker (tansu) arrives with the Kafka issue and will be installed here.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

# The alert rules and their unit tests.
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml

if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
fi
cargo build --locked --all-targets
cargo test --locked
