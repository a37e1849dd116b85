#!/usr/bin/env bash
# Run the test suite from a fresh clone: set up with the test readers (tools/setup.sh),
# then pytest. Extra arguments go to pytest. BLENSOR_BPY=4.2.23 (or 4.5.15) runs it on
# that Blender instead of 5.0.1, in its own environment.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(BLENSOR_EXTRAS=test bash tools/setup.sh | tail -n 1)
# the outside tools (own environment: numpy 2): the vendors' decoders tests/test_pcap.py reads the
# pcap files with, rosbags 0.9.23 for tests/test_rosbag_readers.py, kiss-icp and ouster-cli for
# tests/test_outside_tools.py
bash tools/decoders.sh >/dev/null \
  || echo "test: tools/decoders.sh failed (tests/test_pcap.py, tests/test_rosbag_readers.py and" \
          "tests/test_outside_tools.py need it)" >&2
exec "$venv/bin/python" -m pytest "$@"
