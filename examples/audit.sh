#!/usr/bin/env bash
# Waits for the first audit of a running daemon with [audit] (README "Auditing the active
# model"; another address than http://127.0.0.1:8787 as the first argument), then prints its
# report (GET /v1/audit) and the audit lines of /metrics. Gives up after 15 minutes.
set -euo pipefail
url="${1:-http://127.0.0.1:8787}"

for _ in $(seq 900); do
  code=$(curl -sS -o /dev/null -w '%{http_code}' "$url/v1/audit" || true)
  case "$code" in
    200) break ;;
    404) curl -sS "$url/v1/audit"; echo; exit 1 ;;
  esac
  sleep 1
done
curl -sS --fail-with-body "$url/v1/audit"
echo
curl -sS --fail-with-body "$url/metrics" | grep -E '^neyman_audit'
