"""Motion-data export (reference 10.7 text, TUM, KITTI poses, 3D boxes) and the sensor
trajectory of range scans, against Blender's own matrix_world."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from blensor_addon.jobs.range_scan import scan_range
from conftest import CROSSING

BLENSOR = str(Path(sys.executable).parent / "blensor")


def run(*args):
    return subprocess.run([BLENSOR, *map(str, args)], capture_output=True, text=True)


def quat_matrix(x, y, z, w):
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def rotation_angle(A, B):
    return math.acos(max(-1.0, min(1.0, (np.trace(A.T @ B) - 1.0) / 2.0)))


def world_poses(bpy, names, frames):
    scene = bpy.context.scene
    out = {n: [] for n in names}
    for f in frames:
        scene.frame_set(f)
        for n in names:
            out[n].append(np.array(bpy.data.objects[n].matrix_world, dtype=np.float64))
    return out


def test_motion_cli_formats_against_blender(bpy_mod, crossing, tmp_path):
    out = tmp_path / "m"
    res = run("motion", CROSSING, "--frames", "1-5", "--out", out, "--format", "blensor,tum,kitti,json",
              "--objects", "Car.1,Velodyne,EgoCar,Building_NE")
    assert res.returncode == 0, res.stderr
    names = ["Building_NE", "Car.1", "EgoCar", "Velodyne"]
    fps = bpy_mod.context.scene.render.fps
    poses = world_poses(bpy_mod, names, range(1, 6))
    # the original's text, written here by hand from reference 10.7
    lines = []
    for i, f in enumerate(range(1, 6)):
        bpy_mod.context.scene.frame_set(f)
        for n in ["Car.1", "Velodyne", "EgoCar", "Building_NE"]:  # the order given
            M = bpy_mod.data.objects[n].matrix_world
            e = M.to_euler("XYZ")
            t = M.to_translation()
            lines.append(f"timestamp: {f / fps:.4f} object: {n} x: {t.x:.10f} y: {t.y:.10f} z: {t.z:.10f} "
                         f"rx: {e.x:.10f} ry: {e.y:.10f} rz: {e.z:.10f}\n")
    assert (out / "motion.txt").read_text() == "".join(lines)
    # TUM and KITTI poses: matrix_world within 1e-6 m and 1e-6 rad
    for n in names:
        tum = np.loadtxt(out / "tum" / f"{n}.tum")
        kit = np.loadtxt(out / "kitti_poses" / f"{n}.txt").reshape(-1, 3, 4)
        assert tum.shape == (5, 8) and kit.shape == (5, 3, 4)
        for i, M in enumerate(poses[n]):
            R = M[:3, :3] / np.linalg.norm(M[:3, :3], axis=0)
            assert math.isclose(tum[i, 0], (i + 1) / 24, abs_tol=1e-9)
            assert np.abs(tum[i, 1:4] - M[:3, 3]).max() < 1e-6 and np.abs(kit[i][:, 3] - M[:3, 3]).max() < 1e-6
            assert rotation_angle(quat_matrix(*tum[i, 4:]), R) < 1e-6
            assert rotation_angle(kit[i][:, :3], R) < 1e-6
    # boxes: the labelled objects (not the camera), sizes of the meshes, velocity of the car
    doc = json.loads((out / "boxes" / "00003.json").read_text())
    by = {b["object"]: b for b in doc["boxes"]}
    assert set(by) == {"Car.1", "EgoCar", "Building_NE"}
    car = by["Car.1"]
    assert car["class"] == "car" and car["class_id"] == 10
    dims = np.array(bpy_mod.data.objects["Car.1"].dimensions)
    np.testing.assert_allclose(car["size"], dims, atol=1e-6)
    c2, c3 = (poses["Car.1"][i][:3, 3] for i in (1, 2))
    np.testing.assert_allclose(car["velocity"], (c3 - c2) * 24, atol=1e-6)
    np.testing.assert_allclose(by["Building_NE"]["velocity"], 0.0, atol=1e-9)
    rows = [ln.split() for ln in (out / "tracking.txt").read_text().splitlines()]
    assert len(rows) == 15 and all(len(r) == 17 for r in rows)
    assert {r[2] for r in rows} == {"car", "building"}
    # a second export into the same folder is refused unless --overwrite; bad input is one line
    again = run("motion", CROSSING, "--frames", "1-2", "--out", out, "--format", "tum")
    assert again.returncode == 2 and "out must be a folder without earlier motion files" in again.stderr
    assert "holds boxes/00001.json" in again.stderr
    # motion data goes beside its scan and a scan beside motion data; --overwrite of either
    # replaces only its own kind of files
    assert run("scan", CROSSING, "--frames", "2", "--out", out, "--formats", "npz", "--quiet").returncode == 0
    assert run("scan", CROSSING, "--frames", "2", "--out", out, "--formats", "npz", "--overwrite",
               "--quiet").returncode == 0
    assert (out / "boxes" / "00001.json").exists() and (out / "motion.txt").exists()
    assert run("motion", CROSSING, "--frames", "1-2", "--out", out, "--format", "tum",
               "--overwrite").returncode == 0
    assert (out / "manifest.json").exists() and (out / "scan00001.npz").exists()
    # the overwrite replaced the whole earlier export: no file of it is left to mix with
    man = json.loads((out / "motion.json").read_text())
    assert man["formats"] == ["tum"] and man["frames"] == [1, 2]
    assert all(f.startswith("tum/") for f in man["files"])
    assert not (out / "motion.txt").exists() and not (out / "tracking.txt").exists()
    assert not (out / "boxes").exists() and not (out / "kitti_poses").exists()  # emptied folders go too
    assert sorted(p.relative_to(out).as_posix() for p in (out / "tum").iterdir()) == sorted(man["files"])
    # files of motion names that no export listed are never deleted: refused
    (out / "tum" / "mine.tum").write_text("0 0 0 0 0 0 0 1\n")
    again = run("motion", CROSSING, "--frames", "1-2", "--out", out, "--format", "tum", "--overwrite")
    assert again.returncode == 2
    assert "holds tum/mine.tum, not written by the export of its motion.json" in again.stderr
    assert (out / "tum" / "mine.tum").read_text() == "0 0 0 0 0 0 0 1\n"
    for args, needle in ((["--format", "bvh"], "--format must be a comma-separated subset of blensor,tum,kitti,json"),
                         (["--objects", "Nope"], "--objects must be names of objects of the scene")):
        res = run("motion", CROSSING, "--out", tmp_path / "bad", *args)
        assert res.returncode == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())


def test_range_scan_writes_the_sensor_trajectory(bpy_mod, crossing, tmp_path):
    cam = bpy_mod.data.objects["Velodyne"]
    job = scan_range(cam, range(2, 6), tmp_path, ("npz",), time_model="frame", axes="blensor")
    tum = np.loadtxt(tmp_path / "trajectory.tum")
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert tum.shape == (4, 8) and len(man["frames"]) == 4 and job.status == "complete"
    poses = world_poses(bpy_mod, ["Velodyne"], range(2, 6))["Velodyne"]
    for i, M in enumerate(poses):
        R = M[:3, :3] / np.linalg.norm(M[:3, :3], axis=0)
        assert np.abs(tum[i, 1:4] - M[:3, 3]).max() < 1e-6
        assert rotation_angle(quat_matrix(*tum[i, 4:]), R) < 1e-6
        np.testing.assert_allclose(np.reshape(man["frames"][i]["pose"], (4, 4))[:3, 3], M[:3, 3], atol=1e-9)
    # sweeps (continuous time): one pose per sweep start k / 10 s, near where Blender puts
    # the sensor at that subframe: poses are interpolated between frames, which is off by
    # at most a dt^2 / 8 (the ego's eased keys: about 3 mm here; the budget is 1 cm)
    job = scan_range(cam, range(2, 6), tmp_path / "sweeps", ("npz",), axes="blensor")
    tum = np.loadtxt(tmp_path / "sweeps" / "trajectory.tum")
    # frames 2-5 span [2/24, 6/24) s: the 10 Hz sweeps 0, 1 and 2 overlap them
    np.testing.assert_allclose(tum[:, 0], [0.0, 0.1, 0.2], atol=1e-12)
    scene = bpy_mod.context.scene
    for row in tum:
        frame = row[0] * 24
        scene.frame_set(int(frame), subframe=frame - int(frame))
        M = np.array(cam.matrix_world)
        assert np.abs(row[1:4] - M[:3, 3]).max() < 0.01
        assert rotation_angle(quat_matrix(*row[4:]), M[:3, :3] / np.linalg.norm(M[:3, :3], axis=0)) < 1e-6


def test_export_motion_operator(bpy_mod, crossing, tmp_path):
    s = bpy_mod.data.objects["Velodyne"].data.blensor
    s.output_dir = str(tmp_path)
    s.motion_formats = {"tum"}
    for o in bpy_mod.context.view_layer.objects:
        o.select_set(o.name == "Car.2")
    bpy_mod.context.view_layer.objects.active = bpy_mod.data.objects["Velodyne"]
    assert bpy_mod.ops.blensor.export_motion() == {"FINISHED"}
    # each export of the panel has its own subfolder of the output folder
    assert sorted(p.name for p in (tmp_path / "motion" / "tum").iterdir()) == ["Car.2.tum", "Velodyne.tum"]
    # a range scan of the same camera into the same output folder is not refused for the motion files
    s.formats = {"npz"}
    bpy_mod.context.scene.frame_start, bpy_mod.context.scene.frame_end = 1, 2
    assert bpy_mod.ops.blensor.scan_range("INVOKE_DEFAULT") == {"FINISHED"}
    assert (tmp_path / "scan" / "manifest.json").is_file() and sorted(p.name for p in tmp_path.iterdir()) == [
        "motion", "scan"]
    s.overwrite = True  # and a second export replaces its own files only
    assert bpy_mod.ops.blensor.export_motion() == {"FINISHED"}
    assert (tmp_path / "scan" / "manifest.json").is_file()


def test_boxes_are_what_renders_and_labelled_instancers_get_one(bpy_mod, crossing, tmp_path):
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.jobs.motion_export import export_motion
    export_motion([2, 3], tmp_path / "m", ("json",))
    by = {b["object"]: b for b in json.loads((tmp_path / "m" / "boxes" / "00003.json").read_text())["boxes"]}
    # the trees are empties instancing the excluded TreePrototype collection: one box each
    # around the tree they draw; the prototypes themselves render nowhere and get none
    assert {f"Tree.{k:03d}" for k in range(12)} <= set(by) and not {"TreeCrown", "TreeTrunk"} & set(by)
    tree = bpy_mod.data.objects["Tree.003"]
    coll = tree.instance_collection
    offset = np.eye(4)
    offset[:3, 3] = -np.array(coll.instance_offset)
    place = np.array(tree.matrix_world) @ offset
    corners = np.concatenate([np.array([(place @ np.array(o.matrix_world) @ np.append(c, 1.0))[:3]
                                        for c in o.bound_box]) for o in coll.all_objects if o.type == "MESH"])
    b = by["Tree.003"]
    assert b["class"] == "vegetation" and np.allclose(b["velocity"], 0.0)
    np.testing.assert_allclose(b["center"], (corners.min(0) + corners.max(0)) / 2, atol=1e-6)
    np.testing.assert_allclose(b["size"], corners.max(0) - corners.min(0), atol=1e-6)  # not turned
    # an object hidden from render gets no box; an unknown class name is refused naming it
    bpy_mod.data.objects["Car.1"].hide_render = True
    export_motion([2], tmp_path / "h", ("json",))
    doc = json.loads((tmp_path / "h" / "boxes" / "00002.json").read_text())
    assert "Car.1" not in {b["object"] for b in doc["boxes"]}
    tree["blensor_label"] = "shrub"
    with pytest.raises(SettingsError, match="'shrub' on object 'Tree.003'"):
        export_motion([2], tmp_path / "bad", ("json",))
    assert not (tmp_path / "bad").exists()


def test_objects_whose_file_names_would_clash_keep_their_own_trajectories(bpy_mod, empty_scene, tmp_path):
    # "A B", "A/B" and "A_B" all became tum/A_B.tum: two trajectories were lost
    from blensor_addon.jobs.motion_export import export_motion, file_stems
    names = ["A B", "A/B", "A_B", "Car", "car", "two\nlines"]
    for k, n in enumerate(names):
        o = bpy_mod.data.objects.new(n, None)
        o.location = (float(k), 0.0, 0.0)
        bpy_mod.context.scene.collection.objects.link(o)
    out = tmp_path / "m"
    export_motion([1, 2], out, ("blensor", "tum", "kitti"), objects=names)
    tum = sorted(p.name for p in (out / "tum").iterdir())
    stems = file_stems([bpy_mod.data.objects[n] for n in names])
    assert len(tum) == len(names) == len({s.casefold() for s in stems.values()})
    assert stems["two\nlines"] == "two_lines" and stems["A B"].startswith("A_B-")
    for k, n in enumerate(names):  # every file holds its own object's x
        row = (out / "tum" / f"{stems[n]}.tum").read_text().splitlines()[0].split()
        assert float(row[1]) == k, n
        assert float((out / "kitti_poses" / f"{stems[n]}.txt").read_text().split()[3]) == k, n
    lines = (out / "motion.txt").read_text().splitlines()
    assert len(lines) == 2 * len(names) and sum("object: two\\nlines x:" in ln for ln in lines) == 2


def test_long_names_fit_and_poses_without_a_rotation_are_refused(bpy_mod, empty_scene, tmp_path):
    """Issue 20 section 7.8: object names over ~220 bytes failed ("File name too long")
    and left an empty tum/; 7.11: NaN poses were written with exit 0 and a scale-0 object
    got a made-up quaternion."""
    from blensor_addon.core.errors import SettingsError
    from blensor_addon.jobs.motion_export import export_motion
    long_names = ["x" * 250, "\u00e9" * 120 + "y"]  # 250 bytes; 241 bytes of two-byte letters
    for k, n in enumerate(long_names):
        o = bpy_mod.data.objects.new(n, None)
        o.location = (float(k + 1), 0.0, 0.0)
        bpy_mod.context.scene.collection.objects.link(o)
    names = [o.name for o in bpy_mod.data.objects]
    # Blender 5.0 keeps names of up to 255 bytes (the fault's case), 4.2 and 4.5 of 63
    assert max(len(n.encode()) for n in names) > (240 if bpy_mod.app.version >= (5, 0, 0) else 60)
    out = tmp_path / "m"
    files = export_motion([1, 2], out, ("tum", "kitti"), objects=names)
    assert len(files) == 5 and all(len(Path(f).name.encode()) <= 255 for f in files)
    for f in files:
        if f.startswith("tum/"):
            assert float((out / f).read_text().split()[1]) in (1.0, 2.0)
    assert not [p for p in out.rglob("*.part")]
    # NaN location: refused in one line naming the object and the frame, nothing written
    o = bpy_mod.data.objects[names[0]]
    o.location = (float("nan"), 0.0, 0.0)
    with pytest.raises(SettingsError, match=r"transform of object 'x+' must be finite .*got 'frame 1'"):
        export_motion([1, 2], tmp_path / "nan", ("tum",), objects=names)
    assert not (tmp_path / "nan").exists()
    o.location = (1.0, 0.0, 0.0)
    o.scale = (0.0, 1.0, 1.0)
    with pytest.raises(SettingsError, match=r"non-zero scale on every axis .*got 'scale 0 1 1 at frame 1'"):
        export_motion([1, 2], tmp_path / "s0", ("blensor",), objects=names)
    assert not (tmp_path / "s0").exists()
    # an overwrite refused for bad input leaves the earlier export whole
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(SettingsError, match="non-zero scale"):
        export_motion([1, 2], out, ("tum",), objects=names, overwrite=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # and an overwrite with other formats removes the folders it empties
    o.scale = (1.0, 1.0, 1.0)
    export_motion([1, 2], out, ("blensor",), objects=names, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["motion.json", "motion.txt"]
