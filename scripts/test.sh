#!/usr/bin/env bash
# The full test suite, with everything it needs installed first. README's second command;
# .ci/run calls it. Installs: promtool (Debian `prometheus`, for the metrics lint test and the
# alert-rule unit tests), socat + openssl (the TLS test) and coinor-csdp (the reference SDP
# solver) when missing; the Kafka broker for
# tests/kafka.rs (tansu 0.6.0, fetched by scripts/tansu.sh), exported as TANSU_BIN; curl for
# the README's HTTP example (tests/examples.rs);
# Python confluent-kafka for the interoperability test, exported as NEYMAN_PYTHON; all
# cached under ~/.cache. cargo-deny (scripts/deny.sh) checks the dependencies first.
set -euo pipefail
cd "$(dirname "$0")/.."

# pinned_venv DIR REQUIREMENTS: a venv at DIR with REQUIREMENTS installed by hash (wheels only);
# it keeps a copy of the file and is rebuilt when the file changes or DIR is missing.
pinned_venv() {
  local dir=$1 requirements=$2
  if cmp -s "$requirements" "$dir/requirements.txt"; then
    return
  fi
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    local sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/python" -m pip install -q --require-hashes --only-binary=:all: -r "$requirements"
  cp "$requirements" "$dir/requirements.txt"
}

if ! command -v promtool >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

# socat and the openssl command line: the TLS test (tests/kafka.rs) terminates TLS in front of
# the broker with socat, with certificates openssl makes (tests/common/tls.rs says why).
# curl: examples/score.sh, run by tests/examples.rs.
if ! command -v socat >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends socat openssl curl ca-certificates >/dev/null
fi

# CSDP (Debian coinor-csdp): the reference SDP solver of tests/sdp.rs and `bench sdp`.
if ! command -v csdp >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends coinor-csdp >/dev/null
fi

# The alert rules and their unit tests, and a Prometheus config that loads them.
promtool check config deploy/prometheus/prometheus.yml
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml

# The Kubernetes manifests, parsed and cross-checked offline (`kubectl apply --dry-run=client`
# needs an API server for discovery). PyYAML: Debian python3-yaml when python3 lacks it.
k8s_python=python3
if ! python3 -c 'import tomllib, yaml' 2>/dev/null; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-yaml >/dev/null
  k8s_python=/usr/bin/python3
fi
"$k8s_python" deploy/check_k8s.py

# ... and validated against the Kubernetes OpenAPI schemas (strict: an unknown or misspelled
# field fails) by kubernetes-validate, in a venv cached under ~/.cache, pinned by hash in
# deploy/requirements-k8s-validate.txt and rebuilt when that file changes. The PodMonitor is a
# prometheus-operator CRD whose schema the package does not bundle: check_k8s.py covers it.
K8S_VENV="$HOME/.cache/neyman-k8s-validate"
if ! "$K8S_VENV/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  rm -rf "$K8S_VENV"
fi
pinned_venv "$K8S_VENV" deploy/requirements-k8s-validate.txt
for version in 1.30.0 1.37.0; do
  "$K8S_VENV/bin/kubernetes-validate" --strict --quiet -k "$version" \
    deploy/k8s/configmap.yaml deploy/k8s/deployment.yaml deploy/k8s/statefulset.yaml deploy/k8s/service.yaml
done

# tansu: a Kafka-protocol broker in one static binary; tests spawn one per test on a free
# loopback port. scripts/tansu.sh fetches it (pinned, checked by hash, cached under ~/.cache).
TANSU_BIN="$(bash scripts/tansu.sh)"
export TANSU_BIN
"$TANSU_BIN" --version

# An independent Kafka client for tests/kafka_interop.rs: Python confluent-kafka (its own
# bundled librdkafka) in a venv cached under ~/.cache, exported as NEYMAN_PYTHON. Pinned by
# version and wheel sha256 in tests/interop/requirements.txt; the venv keeps a copy of the file
# it was installed from and is rebuilt when the file changes.
VENV="$HOME/.cache/neyman-venv"
CONFLUENT_KAFKA=2.16.1
if ! "$VENV/bin/python" -c "import confluent_kafka, sys; sys.exit(confluent_kafka.__version__ != '$CONFLUENT_KAFKA')" 2>/dev/null; then
  rm -rf "$VENV"
fi
pinned_venv "$VENV" tests/interop/requirements.txt
export NEYMAN_PYTHON="$VENV/bin/python"
"$NEYMAN_PYTHON" -c "import confluent_kafka; print('confluent-kafka', confluent_kafka.__version__)"

if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
fi
cargo build --locked --all-targets

# Supply chain: advisories, licenses, bans and sources of every dependency (deny.toml).
bash scripts/deny.sh

# The systemd unit, checked against the binary just built (systemd-analyze needs ExecStart to
# exist). Debian `systemd` provides systemd-analyze when the machine lacks it.
if ! command -v systemd-analyze >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
unit_dir=$(mktemp -d)
neyman_bin="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/neyman"
sed "s#/usr/local/bin/neyman#$neyman_bin#" deploy/systemd/neyman.service > "$unit_dir/neyman.service"
# verify exits 0 on an unknown or misspelled directive (it only warns), so any output fails.
verify_out=$(systemd-analyze verify "$unit_dir/neyman.service" 2>&1) || { echo "$verify_out"; exit 1; }
if [ -n "$verify_out" ]; then echo "$verify_out"; exit 1; fi
rm -rf "$unit_dir"

cargo test --locked
