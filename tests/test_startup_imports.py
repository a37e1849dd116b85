"""What a scan does before its first packet, counted (benchmarks/startup.py times it): the
modules a plain ``blensor scan --formats npz`` imports (no library of another format, no
cluster code), and the transform check of every planned frame, whose matrices are read
into one array per frame instead of one per object."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import CROSSING, add_camera, add_mesh, generic_sensor, quad
from test_faults import BLENSOR

#: top-level packages and our modules a one-process npz scan has no use for: the libraries of
#: other formats (rosbag2, las/laz, ply, the preview and range image's PNG), Dask, Open3D
#: (benchmarks only) and the cluster's code (``--workers`` / ``--scheduler`` only)
NOT_FOR_NPZ = ("rosbags", "laspy", "lazrs", "plyfile", "matplotlib", "PIL", "dask", "distributed",
               "open3d", "blensor_addon.jobs.cluster")


def imported_modules(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` reported importing."""
    return {m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", stderr, re.M)}


def test_an_npz_scan_imports_no_other_format_s_library_nor_the_cluster(tmp_path):
    out = tmp_path / "o"
    res = subprocess.run([sys.executable, "-X", "importtime", BLENSOR, "scan", str(CROSSING), "--frames",
                          "1-1", "--out", str(out), "--formats", "npz", "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert [p.name for p in out.glob("*.npz")] == ["scan00000.npz"]  # (the first sweep)
    modules = imported_modules(res.stderr)
    assert {"bpy", "numpy", "blensor_addon.io.formats.npz", "blensor_addon.jobs.range_scan"} <= modules
    loaded = sorted(m for m in modules if m.split(".")[0] in NOT_FOR_NPZ or m.startswith(NOT_FOR_NPZ[-1]))
    assert loaded == []


class CountingNumpy:
    """numpy, with the calls of ``np.array`` counted (the scanner module's conversions)."""

    def __init__(self) -> None:
        self.arrays = 0

    def __getattr__(self, name):
        return getattr(np, name)

    def array(self, *args, **kwargs):
        self.arrays += 1
        return np.array(*args, **kwargs)


def test_the_transform_check_reads_each_frame_s_matrices_as_one_array(bpy_mod, empty_scene, tmp_path,
                                                                       monkeypatch):
    from blensor_addon.scene import scanner
    for k in range(30):
        add_mesh(bpy_mod, f"Box{k:02d}", *quad(-1, 1, -1, 1, -5.0), location=(3.0 * k, 0.0, 0.0))
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=5.0, max_range=60.0)
    scene = bpy_mod.context.scene
    scene.frame_start, scene.frame_end = 1, 8
    counting = CountingNumpy()
    monkeypatch.setattr(scanner, "np", counting)
    checked = []
    check = scanner.Scanner.check_transforms

    def counted(self, frames, cameras=None):
        before = counting.arrays
        frames = list(frames)
        check(self, frames, cameras)
        checked.append((len(frames), counting.arrays - before))

    monkeypatch.setattr(scanner.Scanner, "check_transforms", counted)
    job = blensor_addon_scan_range(cam, range(1, 9), tmp_path / "o")
    assert len(job.done) > 0
    (frames, arrays), = checked
    assert frames >= 8  # (and the frames the last sweep reaches into)
    assert arrays <= 2 * frames  # the 31 objects' matrices and the sensor flags, per frame (was 31 per frame)


def blensor_addon_scan_range(cam, frames, out):
    import blensor_addon
    return blensor_addon.scan_range(cam, frames, out, ("npz",))


@pytest.mark.parametrize("time_model,message", [
    ("continuous", r"transform of object 'Nan' must be finite at every time scanned, got 'NaN/inf at t = "
                   r"[0-9.e+-]+ s \(frame [01]\)'"),
    ("frame", r"transform of object 'Far' must be finite and within \+-1e\+09 \(m, every entry of its world "
              r"matrix\) at every time scanned, got '1e\+31 at t = [0-9.e+-]+ s \(frame 5\)'")])
def test_the_transform_check_refuses_the_first_object_out_of_reach(bpy_mod, empty_scene, tmp_path, time_model,
                                                                    message):
    """A NaN transform is refused in continuous time and left out in frozen frames (the
    scan leaves that object out with a warning); an object beyond 1e9 m is refused in
    both, at the first frame where it is."""
    from blensor_addon.core.errors import SettingsError
    add_mesh(bpy_mod, "Wall", *quad(-50, 50, -20, 20, -10.0))
    nan = add_mesh(bpy_mod, "Nan", *quad(-1, 1, -1, 1, -5.0))
    nan.scale = (float("nan"), 1.0, 1.0)
    far = add_mesh(bpy_mod, "Far", *quad(-1, 1, -1, 1, -5.0))
    for frame, x in ((1, 0.0), (4, 0.0), (5, 1e31)):
        far.location = (x, 0.0, 0.0)
        far.keyframe_insert("location", frame=frame)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=5.0, max_range=60.0, time_model=time_model)
    scene = bpy_mod.context.scene
    scene.frame_start, scene.frame_end = 1, 8
    with pytest.raises(SettingsError) as info:
        blensor_addon_scan_range(cam, range(1, 9), tmp_path / "o")
    assert re.fullmatch(message, str(info.value)), str(info.value)
    assert not any((tmp_path / "o").glob("scan*"))
