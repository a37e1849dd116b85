"""The output folder's policy on hostile input: what an earlier run left is deleted only
once everything of the new run is validated (transforms included), ``--resume`` never
deletes or overwrites finished packets of another range or rig member, a manifest never
reaches outside its folder, the search for earlier outputs looks only where BlenSor
writes, and the operating system's folders are refused by rule."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import CROSSING
from test_faults import one_error_line, run, visible_files

RIG_BLEND = CROSSING.parent / "crossing_rig.blend"


def snapshot(folder: Path) -> dict:
    """Relative path -> bytes of every file below ``folder`` (hidden ones included)."""
    return {n: (folder / n).read_bytes() for n in visible_files(folder)}


@pytest.fixture(scope="module")
def far_scenes(tmp_path_factory):
    """The demo crossing with its sensor (or one object) out of reach, made in one Blender
    subprocess: at 1e31 m (continuous and frozen time), at inf (Blender stores FLT_MAX)."""
    d = tmp_path_factory.mktemp("far")
    code = textwrap.dedent(f"""
        import bpy, blensor_addon
        blensor_addon.register()
        def variant(name, edit):
            bpy.ops.wm.open_mainfile(filepath={str(CROSSING)!r})
            edit(bpy.data.objects["Velodyne"])
            bpy.ops.wm.save_as_mainfile(filepath={str(d)!r} + "/" + name + ".blend")
        variant("far", lambda c: setattr(c, "location", (1e31, 0.0, 0.0)))
        variant("inf", lambda c: setattr(c, "location", (float("inf"), 0.0, 0.0)))
        variant("far_frozen", lambda c: (setattr(c, "location", (1e31, 0.0, 0.0)),
                                         setattr(c.data.blensor, "time_model", "frame")))
        def far_object(c):
            bpy.ops.mesh.primitive_cube_add()
            bpy.context.object.name = "Far"
            bpy.context.object.location = (0.0, 1e31, 0.0)
        variant("far_object", far_object)
        blensor_addon.unregister()
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return d


@pytest.mark.parametrize("name,obj,value", [
    ("far", "Velodyne", "1e+31"), ("inf", "Velodyne", "3.40282e+38"), ("far_frozen", "Velodyne", "1e+31"),
    ("far_object", "Far", "1e+31")])
def test_a_transform_out_of_reach_is_refused_before_overwrite_deletes_the_earlier_run(far_scenes, tmp_path,
                                                                                      name, obj, value):
    out = tmp_path / "o"
    res = run("scan", CROSSING, "--frames", "1-2", "--out", out, "--formats", "npz,pcd", "--quiet")
    assert res.returncode == 0, res.stderr
    before = snapshot(out)
    res = run("scan", far_scenes / f"{name}.blend", "--frames", "1-2", "--out", out, "--formats", "npz,pcd",
              "--overwrite", "--quiet")
    assert res.returncode == 2, res.stderr
    line = one_error_line(res)
    assert re.fullmatch(rf"blensor: error: transform of object '{obj}' must be finite and within \+-1e\+09 "
                        r"\(m, every entry of its world matrix\) at every time scanned, got "
                        rf"'{re.escape(value)} at t = [0-9.e+-]+ s \(frame [01]\)'", line), line
    assert snapshot(out) == before  # byte for byte, the manifest included
