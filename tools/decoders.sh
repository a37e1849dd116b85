#!/usr/bin/env bash
# The outside tools the tests hold BlenSor's files to, in one environment, .venv-decoders, pinned
# in tools/decoders.txt: velodyne-decoder and ouster-sdk (tests/test_pcap.py; ouster-sdk brings
# ouster-cli), the rosbags 0.9.23 ouster-sdk pins (tests/test_rosbag_readers.py reads the README's
# bags with it) and kiss-icp (the odometry tests/test_outside_tools.py and benchmarks/odometry.py
# run). Their own environment: they need numpy 2, which bpy 4.2-5.0 (numpy 1.x) cannot share.
# Idempotent (a stamp of tools/decoders.txt); prints the environment's folder as its last line.
# About 40 s and 250 MB on first run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
VENV=.venv-decoders
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "decoders: $PY not found (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
stamp=$VENV/.blensor-decoders
want=$( (cat tools/decoders.txt; "$PY" --version) | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -x "$VENV/bin/python" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" >&2 || true
  "$VENV/bin/python" -m pip install -q -r tools/decoders.txt 2>&1 \
    | grep -v -e "^WARNING: Location" -e "does not provide the extra" >&2 || true
  mods="velodyne_decoder, ouster.sdk.core, numpy, rosbags.rosbag2, kiss_icp.pipeline"
  "$VENV/bin/python" -c "import $mods" \
    || { echo "decoders: velodyne-decoder, ouster-sdk, rosbags or kiss-icp did not install into $VENV" >&2
         exit 1; }
  echo "$want" > "$stamp"
fi
echo "$VENV"
