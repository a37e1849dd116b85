"""SIGINT and SIGTERM against the ``blensor`` command at the edges of a run: before its
first packet (nothing may be left, so a later plain run works) and during its last one
(the signal is not lost: exit 130, one line, manifest ``cancelled``)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import CROSSING
from test_faults import BLENSOR, one_error_line, visible_files, wait_for


@pytest.fixture(scope="module")
def slow_blend(tmp_path_factory) -> Path:
    """The demo scene with a generic 64-laser sensor at 0.01 deg, one packet a scene
    frame: seconds a packet, so signals land inside the first one."""
    path = tmp_path_factory.mktemp("signals") / "slow.blend"
    code = textwrap.dedent(f"""
        import bpy, blensor_addon
        blensor_addon.register()
        bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
        s = bpy.data.objects["Velodyne"].data.blensor
        s.preset = "generic"
        s.elevations = ",".join(str(-24 + 0.4 * i) for i in range(64))
        s.angle_resolution = 0.01
        s.packets = "frame"
        bpy.ops.wm.save_as_mainfile(filepath={str(path)!r})
        blensor_addon.unregister()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return path


def start_scan(blend: Path, out: Path, frames: str) -> subprocess.Popen:
    return subprocess.Popen([BLENSOR, "scan", str(blend), "--frames", frames, "--out", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_two_signals_before_the_first_packet_leave_nothing_and_a_plain_rerun_works(slow_blend, tmp_path):
    # the run's manifest (cancelled, 0 frames) was left, and a later plain run into the
    # folder was refused as holding another run's files
    out = tmp_path / "o"
    proc = start_scan(slow_blend, out, "1-48")
    wait_for(out / "manifest.json", proc)  # written as the first packet starts
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert not (out / "scan00001.npz").exists(), "the first packet was done before the second signal"
    proc.send_signal(signal.SIGINT)
    res = finished(proc)
    assert res.returncode == 130, res.stderr
    assert one_error_line(res) == "blensor: interrupted by SIGINT; nothing written"
    assert not out.exists()  # the run made the folder: it is gone with the manifest and the lock
    rerun = subprocess.run([BLENSOR, "scan", str(CROSSING), "--frames", "1", "--out", str(out), "--quiet"],
                           capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_two_signals_before_the_first_packet_in_an_existing_folder_leave_it_empty(slow_blend, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    proc = start_scan(slow_blend, out, "1-48")
    wait_for(out / "manifest.json", proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    res = finished(proc)
    assert res.returncode == 130, res.stderr
    assert one_error_line(res) == "blensor: interrupted by SIGTERM; nothing written"
    assert out.is_dir() and visible_files(out) == []  # no manifest, no .blensor.lock


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_only_packet_cancels_the_run(slow_blend, tmp_path, sig):
    # it was swallowed: the run ended complete, exit 0, nothing said
    out = tmp_path / "o"
    proc = start_scan(slow_blend, out, "1")
    wait_for(out / "manifest.json", proc)
    proc.send_signal(sig)
    res = finished(proc)
    assert res.returncode == 130, res.stderr
    assert one_error_line(res) == (f"blensor: interrupted by {sig.name} after 1 of 1 frame; finished frames "
                                   f"kept in {out} (manifest: cancelled)")
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "cancelled" and [f["frame"] for f in man["frames"]] == [1]
    assert visible_files(out) == ["manifest.json", "scan00001.npz", "trajectory.tum"]
