#!/usr/bin/env bash
# The full test suite, with everything it needs installed first. README's second command;
# .ci/run calls it. Today the suite needs only the Rust toolchain: the Kafka broker (tansu) and
# promtool arrive with the daemon and Kafka issues and will be installed here.
set -euo pipefail
cd "$(dirname "$0")/.."

if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
fi
cargo build --locked --all-targets
cargo test --locked
