#!/usr/bin/env bash
# Scores one event over HTTP on a running daemon (README's first command serves on
# 127.0.0.1:8787; another address as the first argument), then shows the active model and the
# FPR metrics. The event is the second of the bundled stream (a spam, id 629-0), its 57
# features given sparsely: the daemon of config/neyman.toml is locked at 57 features.
set -euo pipefail
url="${1:-http://127.0.0.1:8787}"

curl -sS --fail-with-body "$url/v1/score" -H 'Content-Type: application/json' \
  -d '{"id": "629-0", "x": {"indices": [2, 4, 5, 6, 7, 9, 10, 11, 14, 15, 16, 18, 20, 51, 54, 55, 56],
       "values": [0.31, 0.62, 0.62, 0.62, 0.31, 1.88, 0.62, 1.25, 0.31, 1.56, 0.31, 3.76, 1.25, 0.77, 2.481, 11.0, 134.0]}}'
echo
curl -sS --fail-with-body "$url/v1/model"
echo
curl -sS --fail-with-body "$url/metrics" | grep -E '^neyman_(model_version|fpr_bound|fpr_observed) '
