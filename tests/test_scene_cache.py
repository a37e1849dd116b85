"""An unchanged scene costs nothing per scan: what Blender reports unchanged keeps its
arrays, content keys, material rows, BVHs and instance transforms across ``scan()``
calls, and every change Blender makes (an edit, a material, a transform, an object
added or removed, undo, another file) or that no depsgraph update reports (a material's
BlenSor settings, an object's label) is scanned as it is now."""
from __future__ import annotations

import math

import numpy as np
import pytest

import blensor_addon
from blensor_addon import compat
from blensor_addon.core.materials import MaterialTable
from blensor_addon.scene import extract
from conftest import ROOT, add_camera, add_mesh, generic_sensor

SCANS = 10


def _wall_scene(bpy, y=8.0):
    """A camera at the origin looking along +y (generic sensor, three lasers) and a 10 x 10 m
    wall ``Wall`` at ``y`` with the material ``Paint``; returns (camera, wall)."""
    paint = bpy.data.materials.new("Paint")
    _paint(paint, (0.2, 0.6, 0.2))
    cam = add_camera(bpy, rotation=(math.pi / 2, 0.0, 0.0))  # sensor -z (view) = world +y
    generic_sensor(cam, "-10, 0, 10", angle_resolution=1.0, start_angle=-40.0, end_angle=40.0)
    wall = add_mesh(bpy, "Wall", [(-5, y, -5), (5, y, -5), (5, y, 5), (-5, y, 5)], [(0, 1, 2, 3)], paint)
    return cam, wall


def _paint(mat, rgb):
    """Give ``mat`` the base colour ``rgb``: its Principled BSDF's where it has a node tree
    (Blender 5.0 always), else its viewport colour (what a scan reads, scene/shading.py)."""
    tree = mat.node_tree
    node = tree.nodes.get("Principled BSDF") if tree is not None else None
    if node is not None:
        node.inputs["Base Color"].default_value = (*rgb, 1.0)
    else:
        mat.diffuse_color = (*rgb, 1.0)


def _fresh(cam):
    """The scan with every kept array, key, table and snapshot dropped first: what a first
    scan of the scene as it is now gives."""
    extract.forget_scene()
    return blensor_addon.scan(cam)


def _same(a, b) -> bool:
    """The two results are equal, field by field, objects table included."""
    fa, fb = a.arrays(), b.arrays()
    return fa.keys() == fb.keys() and all(np.array_equal(fa[k], fb[k]) for k in fa) and a.objects == b.objects


@pytest.fixture
def counts(monkeypatch):
    """Counts the mesh reads (by mesh name), Geometry Nodes instance reads and distinct
    material row tables made while the test runs."""
    seen = {"mesh": [], "gn": 0, "tables": [], "walks": 0}
    real_arrays, real_plan, real_rows = extract.mesh_arrays, extract._gn_plan, MaterialTable._row_table
    real_builder = extract._Builder

    def arrays(me):
        seen["mesh"].append(me.name)
        return real_arrays(me)

    def plan(parent, b):
        seen["gn"] += 1
        return real_plan(parent, b)

    def rows(self):
        if not any(t is self for t in seen["tables"]):
            seen["tables"].append(self)
        return real_rows(self)

    class Builder(real_builder):  # one per walk over the evaluated scene's instances
        def __init__(self, *args, **kw):
            seen["walks"] += 1
            super().__init__(*args, **kw)

    monkeypatch.setattr(extract, "_Builder", Builder)
    monkeypatch.setattr(extract, "mesh_arrays", arrays)
    monkeypatch.setattr(extract, "_gn_plan", plan)
    monkeypatch.setattr(MaterialTable, "_row_table", rows)
    return seen


def test_a_static_mesh_is_read_once_over_ten_scans(bpy_mod, empty_scene, counts):
    cam, _wall = _wall_scene(bpy_mod)
    extract.forget_scene()
    from blensor_addon import raycast
    backend = raycast.shared_backend("auto")
    results = [blensor_addon.scan(cam) for _ in range(SCANS)]
    builds = (backend.blas_builds, backend.scene_builds) if hasattr(backend, "blas_builds") else None
    assert len(results[0]) > 100 and all(_same(results[0], r) for r in results[1:])
    assert counts["mesh"].count("Wall") == 1  # read (foreach_get, content key) once, not once per scan
    assert len(counts["tables"]) == 1  # one material row table for the ten scans
    if builds is not None:  # the native backend: one BVH and one top level for the ten scans
        blensor_addon.scan(cam)
        assert (backend.blas_builds, backend.scene_builds) == builds


def test_geometry_nodes_instances_are_read_once_over_ten_scans(bpy_mod, empty_scene, counts):
    import importlib.util
    spec = importlib.util.spec_from_file_location("gn_scatter", ROOT / "scenes" / "gn_scatter.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.make_gn_scatter(bpy_mod, n=21, size=20.0, box_half=0.2, z=-1.5)
    cam = add_camera(bpy_mod, rotation=(math.pi / 2, 0.0, 0.0))
    generic_sensor(cam, "-20, -30, -45", angle_resolution=2.0)
    extract.forget_scene()
    results = [blensor_addon.scan(cam) for _ in range(SCANS)]
    assert len(results[0]) > 100 and all(_same(results[0], r) for r in results[1:])
    # the scene's instances walked once, not once per scene sample of every scan; the 441
    # transforms read once as arrays where Blender has GeometrySet (4.3+), else in that walk
    assert counts["walks"] == 1
    assert counts["gn"] == (1 if compat.GeometrySet is not None else 0)
    assert _same(results[-1], _fresh(cam))


def test_a_geometry_edit_is_scanned(bpy_mod, empty_scene, counts):
    cam, wall = _wall_scene(bpy_mod)
    before = blensor_addon.scan(cam)
    for v in wall.data.vertices:
        v.co.y = 6.0
    wall.data.update()
    after = blensor_addon.scan(cam)
    assert counts["mesh"].count("Wall") == 2
    np.testing.assert_allclose(after.range.min(), 6.0, rtol=1e-4)
    assert not np.allclose(before.range.min(), after.range.min())
    assert _same(after, _fresh(cam))


def test_material_edits_are_scanned(bpy_mod, empty_scene):
    cam, wall = _wall_scene(bpy_mod)
    paint = bpy_mod.data.materials["Paint"]
    before = blensor_addon.scan(cam)
    _paint(paint, (0.9, 0.1, 0.1))  # a depsgraph update
    coloured = blensor_addon.scan(cam)
    assert not np.array_equal(before.color, coloured.color) and _same(coloured, _fresh(cam))
    paint.blensor.reflectivity = 0.123  # no depsgraph update reports this one
    set_ = blensor_addon.scan(cam)
    assert np.all(set_.reflectivity == np.float32(0.123)) and _same(set_, _fresh(cam))
    wall.data.materials[0] = bpy_mod.data.materials.new("Other")  # another material in the slot
    other = blensor_addon.scan(cam)
    assert not np.array_equal(other.reflectivity, set_.reflectivity) and _same(other, _fresh(cam))


def test_transforms_and_labels_are_scanned(bpy_mod, empty_scene):
    cam, wall = _wall_scene(bpy_mod)
    blensor_addon.scan(cam)
    wall.location.y = 2.0
    moved = blensor_addon.scan(cam)
    np.testing.assert_allclose(moved.range.min(), 10.0, rtol=1e-4)
    cam.location.y = 1.0  # the sensor moves
    closer = blensor_addon.scan(cam)
    np.testing.assert_allclose(closer.range.min(), 9.0, rtol=1e-4)
    wall["blensor_label"] = "building"  # an ID property: no depsgraph update
    labelled = blensor_addon.scan(cam)
    assert [o["label"] for o in labelled.objects if o["name"] == "Wall"] == ["building"]
    assert _same(labelled, _fresh(cam))


def test_added_removed_and_hidden_objects_are_scanned(bpy_mod, empty_scene):
    cam, wall = _wall_scene(bpy_mod)
    alone = blensor_addon.scan(cam)
    near = add_mesh(bpy_mod, "Near", [(-1, 4, -5), (1, 4, -5), (1, 4, 5), (-1, 4, 5)], [(0, 1, 2, 3)])
    both = blensor_addon.scan(cam)
    np.testing.assert_allclose(both.range.min(), 4.0, rtol=1e-4)
    assert _same(both, _fresh(cam))
    near.hide_render = True
    hidden = blensor_addon.scan(cam)
    assert np.array_equal(hidden.range, alone.range) and _same(hidden, _fresh(cam))
    near.hide_render = False
    assert _same(blensor_addon.scan(cam), both)
    bpy_mod.data.objects.remove(near)
    gone = blensor_addon.scan(cam)
    assert _same(gone, alone) and _same(gone, _fresh(cam))
    bpy_mod.data.objects.remove(wall)
    assert len(blensor_addon.scan(cam)) == 0


def test_undo_is_scanned(bpy_mod, empty_scene):
    cam, wall = _wall_scene(bpy_mod)
    bpy_mod.ops.ed.undo_push(message="wall at 8 m")
    at8 = blensor_addon.scan(cam)
    for v in wall.data.vertices:
        v.co.y = 5.0
    wall.data.update()
    bpy_mod.ops.ed.undo_push(message="wall at 5 m")
    at5 = blensor_addon.scan(cam)
    np.testing.assert_allclose(at5.range.min(), 5.0, rtol=1e-4)
    bpy_mod.ops.ed.undo()
    cam = bpy_mod.data.objects["Sensor"]  # undo gave new Python objects
    undone = blensor_addon.scan(cam)
    assert _same(undone, at8)
    bpy_mod.ops.ed.redo()
    cam = bpy_mod.data.objects["Sensor"]
    assert _same(blensor_addon.scan(cam), at5)


def test_another_file_is_scanned(bpy_mod, empty_scene, tmp_path):
    # two files whose walls differ only in their vertices (same names, same sizes)
    paths = []
    for y in (8.0, 5.0):
        bpy_mod.ops.wm.read_factory_settings(use_empty=True)
        _wall_scene(bpy_mod, y)
        paths.append(str(tmp_path / f"wall{int(y)}.blend"))
        bpy_mod.ops.wm.save_as_mainfile(filepath=paths[-1])
    ranges = []
    for p in paths + paths:
        blensor_addon.open_blend(p)
        ranges.append(float(blensor_addon.scan(bpy_mod.data.objects["Sensor"]).range.min()))
    np.testing.assert_allclose(ranges, [8.0, 5.0, 8.0, 5.0], rtol=1e-4)


def test_animation_is_scanned_at_each_frame(bpy_mod, empty_scene):
    cam, wall = _wall_scene(bpy_mod)
    wall.keyframe_insert("location", frame=1)
    wall.location.y = 4.0
    wall.keyframe_insert("location", frame=11)
    cam.data.blensor.time_model = "frame"
    near = [float(blensor_addon.scan(cam, frame=f).range.min()) for f in (1, 6, 11, 6, 1)]
    np.testing.assert_allclose(near, [8.0, 10.0, 12.0, 10.0, 8.0], rtol=1e-3)


def test_a_static_scene_is_read_and_hashed_once_over_the_packets_of_a_run(bpy_mod, empty_scene, counts,
                                                                          monkeypatch, tmp_path):
    # a range run hashes every packet's geometry for --resume: the one snapshot of an
    # unchanged scene is read once and hashed once, however many packets
    import hashlib
    import types

    from blensor_addon.raycast import base
    hashed = []

    def sha256():
        hashed.append(1)
        return hashlib.sha256()

    monkeypatch.setattr(base, "hashlib", types.SimpleNamespace(sha256=sha256))
    cam, _wall = _wall_scene(bpy_mod)
    cam.data.blensor.time_model = "frame"
    extract.forget_scene()
    blensor_addon.scan_range(cam, range(1, 9), str(tmp_path / "run"), formats=("npz",))
    assert len(list((tmp_path / "run").glob("*.npz"))) == 8
    assert counts["mesh"].count("Wall") == 1 and len(hashed) == 1


def test_motion_records_are_made_for_the_instances_that_move_only(monkeypatch):
    # one car moving among 10^4 static instances: the records (a QR and a quaternion per
    # instance) are made for the one row whose two transforms differ, bit for bit those
    # of all rows at once (mirrored, singular and non-finite rows among them)
    from blensor_addon.raycast import motion
    from blensor_addon.raycast.base import MeshData, SceneGeometry
    rng = np.random.default_rng(7)
    n = 10_000
    m0 = np.tile(np.eye(4, dtype=np.float32), (n, 1, 1))
    m0[:, :3, :] = rng.normal(size=(n, 3, 4)).astype(np.float32)
    m0[5, 0, :3] *= -1.0  # mirrored
    m0[6, :3, :3] = 0.0  # singular
    m0[7, 1, 1] = np.nan
    m1 = m0.copy()
    moved = [3, 5, 6, 7, 9999]
    m1[moved, :3, 3] += 1.0
    mesh = MeshData(np.zeros((3, 3), np.float32), np.array([[0, 1, 2]], np.int32))
    geometry = SceneGeometry([mesh], np.zeros(n, np.int32), m0, instance_matrix_end=m1)
    rows = []
    real = motion.decompose
    monkeypatch.setattr(motion, "decompose", lambda M: rows.append(len(M)) or real(M))
    rec, moving = geometry.motion()
    assert rows == [len(moved), len(moved)]  # start and end, of the rows that differ only
    full, full_moving = motion.motion_records(m0, m1)
    assert np.array_equal(moving, full_moving) and moving.sum() == 3  # singular, NaN rows do not move
    assert np.array_equal(rec[moving].view(np.uint64), full[full_moving].view(np.uint64))


def test_static_meshes_keep_their_material_rows_while_another_object_moves(bpy_mod, empty_scene, monkeypatch):
    # a box driving past the wall changes the scene at every sample (each is extracted
    # again), but the wall's and the box's meshes do not change: their triangles' material
    # slots are concatenated and their material rows tabled once for every sample and scan
    cam, _wall = _wall_scene(bpy_mod)
    box = add_mesh(bpy_mod, "Box", [(-1, 5, -1), (1, 5, -1), (1, 5, 1), (-1, 5, 1)], [(0, 1, 2, 3)])
    fc = box.driver_add("location", 0)
    fc.driver.type = "SCRIPTED"
    fc.driver.expression = "frame * 0.5"
    extract.forget_scene()
    made = []
    real = MaterialTable._row_table

    def rows(self):
        out = real(self)
        made.append((self.tri_material, None if out is None else out[0]))
        return out

    monkeypatch.setattr(MaterialTable, "_row_table", rows)
    results = [blensor_addon.scan(cam, frame=f) for f in (1, 2, 3)]
    assert all(len(r) > 100 for r in results) and len(made) >= 3  # every scan looked rows up
    assert len({id(t) for t, _ in made}) == 1 and len({id(r) for _, r in made}) == 1
    assert all(_same(a, b) for a, b in zip(results[::-1], [blensor_addon.scan(cam, frame=f) for f in (3, 2, 1)]))
