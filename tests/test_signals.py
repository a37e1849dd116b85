"""SIGINT and SIGTERM against the ``blensor`` command at the edges of a run: before its
first packet (nothing may be left, so a later plain run works) and during its last one
(the signal is not lost: exit 130, one line, manifest ``cancelled``)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import CROSSING
from test_faults import BLENSOR, one_error_line, visible_files, wait_for

#: the demo's sensor made slow (seconds a packet: a generic 64-laser head at 0.01 deg, one
#: packet a scene frame), as code run in a Blender subprocess (one line: it goes into the
#: fixtures' scripts at their indentation)
SLOW_SENSOR = ('s = bpy.data.objects["Velodyne"].data.blensor; s.preset = "generic"; '
               's.elevations = ",".join(str(-24 + 0.4 * i) for i in range(64)); s.angle_resolution = 0.01; '
               's.packets = "frame"')


@pytest.fixture(scope="module")
def slow_blend(tmp_path_factory) -> Path:
    """The demo scene with a generic 64-laser sensor at 0.01 deg, one packet a scene
    frame: seconds a packet, so signals land inside the first one."""
    path = tmp_path_factory.mktemp("signals") / "slow.blend"
    code = textwrap.dedent(f"""
        import bpy, blensor_addon
        blensor_addon.register()
        bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
        {SLOW_SENSOR}
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
    time.sleep(0.1)  # (the tester sent them 0.5 s apart; a fast machine may finish a packet in that)
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
    time.sleep(0.1)  # (the tester sent them 0.5 s apart; a fast machine may finish a packet in that)
    proc.send_signal(signal.SIGTERM)
    res = finished(proc)
    assert res.returncode == 130, res.stderr
    assert one_error_line(res) == "blensor: interrupted by SIGTERM; nothing written"
    assert out.is_dir() and visible_files(out) == []  # no manifest, no .blensor.lock


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_only_packet_cancels_the_run(slow_blend, tmp_path, sig):
    # it was swallowed: the run ended complete, exit 0, nothing said
    # The manifest is written just before the run's first look at the signals; a signal
    # that lands between the two (a loaded machine) stops the run before its packet, with
    # nothing left, as it must. So the signal is sent a little after the manifest appears
    # (the packet takes seconds), and where it still came first, that ending is checked and
    # the run tried again, later.
    for attempt, delay in enumerate((0.2, 0.6, 1.2)):
        out = tmp_path / f"o{attempt}"
        proc = start_scan(slow_blend, out, "1")
        wait_for(out / "manifest.json", proc)
        time.sleep(delay)
        proc.send_signal(sig)
        res = finished(proc)
        assert res.returncode == 130, res.stderr
        if one_error_line(res) != f"blensor: interrupted by {sig.name}; nothing written":
            break
        assert not out.exists()  # before the packet: the run's folder is gone with its manifest
    else:
        pytest.fail("every signal landed before the run's packet began")
    assert one_error_line(res) == (f"blensor: interrupted by {sig.name} after 1 of 1 frame; finished frames "
                                   f"kept in {out} (manifest: cancelled)")
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "cancelled" and [f["frame"] for f in man["frames"]] == [1]
    assert visible_files(out) == ["manifest.json", "scan00001.npz", "trajectory.tum"]


@pytest.fixture(scope="module")
def cache_scene(tmp_path_factory) -> Path:
    """The slow scene plus a cube read from an Alembic file sequence ``cube_001.abc`` ..
    ``cube_005.abc`` (one file a frame, opened by Blender's C code inside every frame
    change, with or without the interpreter's lock)."""
    d = tmp_path_factory.mktemp("cache")
    code = textwrap.dedent(f"""
        import shutil, bpy, blensor_addon
        blensor_addon.register()
        bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
        {SLOW_SENSOR}
        s.time_model = "frame"
        bpy.ops.mesh.primitive_cube_add(location=(0, 10, 1))
        cube = bpy.context.object
        bpy.ops.object.select_all(action="DESELECT")
        cube.select_set(True)
        bpy.ops.wm.alembic_export(filepath={str(d / 'cube_001.abc')!r}, selected=True, start=1, end=1)
        for i in range(2, 6):
            shutil.copy({str(d / 'cube_001.abc')!r}, {str(d)!r} + f"/cube_{{i:03d}}.abc")
        bpy.data.objects.remove(cube)
        bpy.ops.wm.alembic_import(filepath={str(d / 'cube_001.abc')!r}, always_add_cache_reader=True,
                                  is_sequence=True)
        bpy.ops.wm.save_as_mainfile(filepath={str(d / 'cache.blend')!r})
        blensor_addon.unregister()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return d / "cache.blend"


def as_fifo(path: Path) -> None:
    """Replace the file at ``path`` by a FIFO no one writes to: opening it blocks (a hung
    network file does the same); Blender's Alembic reader opens it again after EINTR."""
    path.unlink()
    os.mkfifo(path)


#: what Blender's Alembic reader prints on stderr when the signal interrupts its open()
ALEMBIC_NOISE = "Could not open as Ogawa file from provided streams."


def stuck_line(res) -> str:
    """The command's one line: the last on stderr, after only Blender's own noise."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines and "Traceback" not in res.stderr, res.stderr
    assert all(ln == ALEMBIC_NOISE for ln in lines[:-1]), res.stderr
    return lines[-1]


def wait_until_blocked_on_a_fifo(proc: subprocess.Popen, limit: float = 120.0) -> None:
    """Wait until a thread of ``proc`` waits in the kernel for a FIFO's other end (Linux
    ``wchan`` ``wait_for_partner``/``fifo_open``: Blender's open() of the cache file), at
    most ``limit`` s; elsewhere 8 s."""
    tasks = Path(f"/proc/{proc.pid}/task")
    if not tasks.is_dir():
        time.sleep(8)
        return
    end = time.monotonic() + limit
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        for t in tasks.iterdir():
            try:
                if (t / "wchan").read_text().strip() in ("wait_for_partner", "fifo_open"):
                    return
            except OSError:
                continue
        time.sleep(0.2)
    raise AssertionError(f"the scan did not block on the FIFO within {limit:g} s")


def needs_watchdog() -> None:
    from blensor_addon.raycast import native
    if not native.available() or not hasattr(native.load_library(), "brt_watchdog_start"):
        pytest.skip("needs the native library with its signal watchdog (native_patch/build.py)")


def test_sigterm_while_blender_is_stuck_before_the_run_ends_it_in_one_line(cache_scene, tmp_path):
    # the first signal interrupted Blender's open() of the FIFO, which opened it again:
    # no Python handler ran, the command never ended (only SIGKILL did)
    needs_watchdog()
    blend = tmp_path / "cache.blend"
    for f in cache_scene.parent.iterdir():
        shutil.copy(f, tmp_path / f.name)
    as_fifo(tmp_path / "cube_003.abc")  # the transform pre-check opens it at frame 3
    out = tmp_path / "o"
    proc = start_scan(blend, out, "1-5")
    try:
        wait_until_blocked_on_a_fifo(proc)  # Blender loaded, stuck in the pre-check
        time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        res = finished(proc)
    finally:
        proc.kill()
    assert res.returncode == 130, res.stderr
    assert stuck_line(res) == ("blensor: interrupted by SIGTERM; nothing written (Blender did not return "
                                   "within 5 s)")
    assert not out.exists()


def test_sigterm_while_blender_is_stuck_in_a_packet_keeps_the_finished_ones(cache_scene, tmp_path):
    needs_watchdog()
    blend = tmp_path / "cache.blend"
    for f in cache_scene.parent.iterdir():
        shutil.copy(f, tmp_path / f.name)
    out = tmp_path / "o"
    proc = start_scan(blend, out, "1-5")
    try:
        wait_for(out / "manifest.json", proc)  # validated: every cache file was read once
        as_fifo(tmp_path / "cube_005.abc")  # a file that hangs from now on: the scan gets stuck
        wait_for(out / "scan00001.npz", proc)
        wait_until_blocked_on_a_fifo(proc)  # (a packet takes about 2 s)
        time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        res = finished(proc)
    finally:
        proc.kill()
    assert res.returncode == 130, res.stderr
    line = stuck_line(res)
    m = re.fullmatch(r"blensor: interrupted by SIGTERM after (\d) finished packets \(Blender did not return "
                     rf"within 5 s\); the packets listed in {re.escape(str(out / 'manifest.json'))} are kept "
                     r"\(manifest: cancelled\)", line)
    assert m, line
    done = list(range(1, int(m.group(1)) + 1))
    man = json.loads((out / "manifest.json").read_text())
    assert man["status"] == "cancelled" and [f["frame"] for f in man["frames"]] == done
    # no lock, no temporary file
    assert visible_files(out) == ["manifest.json", *(f"scan{f:05d}.npz" for f in done), "trajectory.tum"]
