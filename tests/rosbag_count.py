"""Count a rosbag2's messages per topic with whichever ``rosbags`` runs this script: every
message its reader yields, and the counts the bag's metadata declares.

Run by tests/test_rosbag_readers.py with the project's rosbags and with rosbags 0.9.23 (the
decoders' environment, ``.venv-decoders``, tools/decoders.sh: the version ``pip install
ouster-sdk`` pins)::

    python tests/rosbag_count.py BAG_FOLDER...

Prints one JSON object: folder -> {"read": {topic: n}, "declared": {topic: n}, "version": str}.
"""
import json
import sys
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from rosbags.rosbag2 import Reader

out = {}
for folder in sys.argv[1:]:
    with Reader(Path(folder)) as reader:
        read = Counter(conn.topic for conn, _, _ in reader.messages())
        declared = Counter()
        for conn in reader.connections:
            declared[conn.topic] += conn.msgcount
    out[folder] = {"read": dict(read), "declared": dict(declared), "version": version("rosbags")}
print(json.dumps(out))
