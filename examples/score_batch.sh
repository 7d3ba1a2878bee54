#!/usr/bin/env bash
# Scores a batch over HTTP: an array of events gets an array of score objects in the same
# order, all from one model. The two events are the first two of the bundled stream (a
# legitimate e-mail and a spam), as sparse vectors of the 57 features. The address is the
# first argument (default: the daemon of README's first command).
set -euo pipefail
url="${1:-http://127.0.0.1:8787}"

curl -sS --fail-with-body "$url/v1/score" -H 'Content-Type: application/json' -d '[
  {"id": "4339-0", "x": {"indices": [11, 17, 18, 20, 44, 45, 49, 54, 55, 56],
                         "values": [0.92, 0.92, 3.7, 0.92, 0.92, 1.85, 0.295, 2.535, 12.0, 71.0]}},
  {"id": "629-0", "x": {"indices": [2, 4, 5, 6, 7, 9, 10, 11, 14, 15, 16, 18, 20, 51, 54, 55, 56],
                        "values": [0.31, 0.62, 0.62, 0.62, 0.31, 1.88, 0.62, 1.25, 0.31, 1.56, 0.31, 3.76, 1.25, 0.77, 2.481, 11.0, 134.0]}}
]'
echo
