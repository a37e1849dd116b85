"""A write that fails inside a writer's own library (sqlite3 under a rosbag2 bag) ends the
run as any full disk does: exit 1, one line, the manifest ``failed`` with every finished
frame, whose files are whole."""
from __future__ import annotations

import errno
import json
import re
import resource
import sqlite3
import subprocess

import numpy as np
import pytest

from blensor_addon.jobs.failures import writer_failure
from conftest import CROSSING
from test_faults import BLENSOR, one_error_line, visible_files

#: largest file the scan may write (RLIMIT_FSIZE): a KITTI sweep (2 MB) fits, the bag's
#: database and its journal outgrow it within a few sweeps
FILE_LIMIT = 4_000_000


def _small_files():  # in the child, before it runs the command: writes past the limit fail (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


def test_a_sqlite_bag_that_cannot_grow_is_a_one_line_write_failure(tmp_path):
    # sqlite3.OperationalError escaped with a traceback (and the manifest said failed only
    # by luck of the clean-up)
    out = tmp_path / "o"
    res = subprocess.run([BLENSOR, "scan", str(CROSSING), "--frames", "1-24", "--out", str(out), "--formats",
                          "kitti,rosbag2", "--option", "rosbag2.storage=sqlite3", "--quiet"],
                         capture_output=True, text=True, preexec_fn=_small_files, timeout=300)
    assert res.returncode == 1, res.stderr
    line = one_error_line(res)
    m = re.fullmatch(r"blensor: error: writing failed: (disk I/O error|database or disk is full) \(rosbag2 "
                     rf"files in {re.escape(str(out))}\); (\d+) finished frames and the manifest \(status "
                     r"failed\) are kept(?: \(rosbag2 could not be closed and was removed\))?", line)
    assert m, line
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "failed" and len(man["frames"]) == int(m.group(2)) >= 1
    listed = {n for f in man["frames"] for n in f["files"]} | set(man["files"]) | {"manifest.json"}
    assert set(visible_files(out)) == listed  # no temporary or partial file
    for i, f in enumerate(man["frames"]):  # every finished sweep is whole
        assert (out / "velodyne" / f"{i:06d}.bin").stat().st_size == 16 * f["points"]
    assert len(np.loadtxt(out / "poses.txt").reshape(-1, 12)) == len(man["frames"])


def test_a_full_sqlite_database_is_an_enospc_write_failure(tmp_path):
    db = sqlite3.connect(tmp_path / "bag.db3")
    db.execute("PRAGMA max_page_count = 2")  # sqlite's own 'full disk' (SQLITE_FULL)
    with pytest.raises(sqlite3.OperationalError) as err:
        db.execute("CREATE TABLE t (x BLOB)")
        db.execute("INSERT INTO t VALUES (?)", (bytes(100_000),))
    failure = writer_failure(err.value, "rosbag2", tmp_path)
    assert isinstance(failure, OSError) and failure.errno == errno.ENOSPC
    assert failure.strerror == "database or disk is full"
    assert failure.filename == f"rosbag2 files in {tmp_path}"
    assert writer_failure(TypeError("a bug"), "rosbag2", tmp_path) is None  # not taken for a full disk
