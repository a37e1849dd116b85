"""Count a rosbag2's messages per topic with whichever ``rosbags`` runs this script: every
message its reader yields, those of them its typestore deserializes (the ROS 2 Humble message
definitions rosbags ships), and the counts the bag's metadata declares.

Run by tests/test_rosbag_readers.py with the project's rosbags and with rosbags 0.9.23 (the
decoders' environment, ``.venv-decoders``, tools/decoders.sh: the version ``pip install
ouster-sdk`` pins)::

    python tests/rosbag_count.py BAG_FOLDER...

Prints one JSON object: folder -> {"read": {topic: n}, "decoded": {topic: n}, "declared": {topic: n},
"version": str}.
"""
import json
import sys
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from rosbags.rosbag2 import Reader
from rosbags.typesys import Stores, get_typestore

typestore = get_typestore(Stores.ROS2_HUMBLE)
out = {}
for folder in sys.argv[1:]:
    read, decoded = Counter(), Counter()
    with Reader(Path(folder)) as reader:
        for conn, _, raw in reader.messages():
            read[conn.topic] += 1
            if typestore.deserialize_cdr(raw, conn.msgtype) is not None:
                decoded[conn.topic] += 1
        declared = Counter()
        for conn in reader.connections:
            declared[conn.topic] += conn.msgcount
    out[folder] = {"read": dict(read), "decoded": dict(decoded), "declared": dict(declared),
                   "version": version("rosbags")}
print(json.dumps(out))
