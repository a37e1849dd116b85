"""Every bag the README's commands make is read whole by rosbags 0.9.23 (what ``pip install
ouster-sdk`` pins; in the decoders' environment, ``.venv-decoders``, tools/decoders.sh) and by
the project's rosbags: every message the bag's metadata declares, each deserialized with
rosbags' ROS 2 message definitions (tests/rosbag_count.py), with one ``/tf_static``,
one point cloud per packet and a ``/tf`` per packet start.

rosbags 0.9.23's MCAP reader skips, without a word, every chunk whose first message is at
log time 0: bags stamped from UNIX time 0 lost ``/tf_static`` and their first cloud, a rosette
bag all its messages. The bags' time base (``--start-time``, default 2020-01-01T00:00:00Z,
blensor_addon/core/timebase.py) keeps every stamp above 0.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_docs import COMMANDS

#: rosbags 0.9.23's interpreter (tools/decoders.sh builds it)
OLD_ROSBAGS = ROOT / ".venv-decoders" / "bin" / "python"
COUNT = ROOT / "tests" / "rosbag_count.py"

#: the README's scans that write a bag
BAG_COMMANDS = [c for c in COMMANDS if c.split()[:2] == [".venv/bin/blensor", "scan"]
                and "rosbag2" in c.split()[c.split().index("--formats") + 1].split(",")]


def counts(python, bag: Path) -> dict:
    """{"read": topic -> messages read, "declared": topic -> the metadata's count,
    "version": rosbags' version} of ``bag`` with the rosbags of interpreter ``python``."""
    res = subprocess.run([str(python), str(COUNT), str(bag)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)[str(bag)]


def test_the_readme_makes_bags_of_a_velodyne_a_rig_and_a_rosette():
    joined = " ".join(BAG_COMMANDS)
    assert len(BAG_COMMANDS) >= 3
    assert "--camera" in joined and "sensor_type=rosette" in joined and "preset=os1_64" in joined


@pytest.mark.parametrize("command", BAG_COMMANDS)
def test_every_message_of_a_readme_bag_is_read_by_rosbags_0_9_23_and_the_current(command, tmp_path, request):
    if not OLD_ROSBAGS.exists():
        msg = "rosbags 0.9.23 (.venv-decoders) is absent: bash tools/decoders.sh builds it"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    if command == COMMANDS[0]:  # the quick start: its one run of the session (conftest)
        out = request.getfixturevalue("readme_checkout") / command.split()[command.split().index("--out") + 1]
    else:
        argv = command.split()
        argv[argv.index("--out") + 1] = str(tmp_path / "out")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "BLENSOR_NATIVE_LIB")}
        res = subprocess.run([str(Path(sys.executable).parent / "blensor"), *argv[1:], "--quiet"], cwd=ROOT,
                             capture_output=True, text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr
        out = tmp_path / "out"
    rig = (out / "rig.json").exists()  # a rig: a manifest per member
    manifests = sorted(out.glob("*/manifest.json")) if rig else [out / "manifest.json"]
    packets = sum(len(json.loads(m.read_text())["frames"]) for m in manifests)
    old, new = counts(OLD_ROSBAGS, out / "rosbag2"), counts(sys.executable, out / "rosbag2")
    assert old["version"] == "0.9.23" and new["version"] != "0.9.23"
    declared = new["declared"]
    assert old["declared"] == declared
    assert old["read"] == declared, f"rosbags 0.9.23 read {old['read']} of {declared}"
    assert new["read"] == declared
    assert old["decoded"] == new["decoded"] == declared
    # one static transform message, a cloud per packet (and sensor), the base's tf per packet start
    assert declared["/tf_static"] == 1
    clouds = sum(n for t, n in declared.items() if t.endswith("/points"))
    assert clouds == packets > 0
    starts = declared["/blensor/odom"]
    assert 0 < starts <= packets and starts <= declared["/tf"] <= starts + 1
