#!/usr/bin/env bash
# Set up a development environment from nothing: .venv with Python 3.11, pinned bpy==5.0.1
# and numpy<2 (pyproject.toml), the test readers (Open3D, pypcd4) and Embree for the
# benchmark, then build the native ray-cast library into build/native/.
# Idempotent: a second run only rebuilds the native library.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "setup: $PY not found; bpy==5.0.1 needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
# Open3D's wheel links libusb-1.0; install it where apt is available and it is missing.
if ! ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0'; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq libusb-1.0-0) >/dev/null 2>&1 \
      || echo "setup: could not install libusb-1.0-0 (Open3D tests will fail)" >&2
  else
    echo "setup: libusb-1.0 missing (Open3D needs it; install libusb-1.0-0)" >&2
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.blensor-setup
want=$(cat pyproject.toml tools/setup.sh | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[bpy,test]"
  echo "$want" > "$stamp"
fi
.venv/bin/python native_patch/build.py
