"""Depsgraph -> arrays: triangulation equals Blender's, modifiers and instances are
scanned as evaluated, hidden objects are not, ids are stable and labelled."""
from __future__ import annotations

import math

import numpy as np

import blensor_addon
from blensor_addon.scene.extract import SceneExtractor, mesh_arrays
from conftest import ROOT, add_camera, add_mesh, generic_sensor


def loop_triangles(mesh):
    n = len(mesh.loop_triangles)
    t = np.empty(n * 3, np.int32)
    mesh.loop_triangles.foreach_get("vertices", t)
    m = np.empty(n, np.int32)
    mesh.loop_triangles.foreach_get("material_index", m)
    return t.reshape(-1, 3), m


def test_fast_triangulation_equals_blenders(bpy_mod, crossing):
    dg = bpy_mod.context.evaluated_depsgraph_get()
    checked = 0
    for ob in crossing.objects:
        if ob.type != "MESH":
            continue
        me = ob.evaluated_get(dg).data
        v, t, m = mesh_arrays(me)
        ref_t, ref_m = loop_triangles(me)
        assert np.array_equal(t, ref_t) and np.array_equal(m, ref_m), ob.name
        assert v.shape == (len(me.vertices), 3)
        checked += 1
    assert checked >= 15


def test_ngons_and_mixed_faces(bpy_mod, empty_scene):
    # a concave hexagon (n-gon) next to a triangle and a quad with two materials
    verts = [(0, 0, 0), (4, 0, 0), (4, 3, 0), (2, 1, 0), (0, 3, 0), (-1, 1.5, 0),
             (6, 0, 0), (7, 0, 0), (7, 1, 0), (6, 1, 0), (9, 0, 0), (10, 0, 0), (9, 1, 0)]
    faces = [(0, 1, 2, 3, 4, 5), (6, 7, 8, 9), (10, 11, 12)]
    ob = add_mesh(bpy_mod, "Mixed", verts, faces)
    ob.data.polygons[1].material_index = 1
    v, t, m = mesh_arrays(ob.data)
    ref_t, ref_m = loop_triangles(ob.data)
    assert np.array_equal(t, ref_t) and np.array_equal(m, ref_m)
    quad_only = add_mesh(bpy_mod, "Quads", verts[6:10], [(0, 1, 2, 3)])
    assert np.array_equal(mesh_arrays(quad_only.data)[1], loop_triangles(quad_only.data)[0])
    # triangles only (the corners taken in order), with a second material
    tri_only = add_mesh(bpy_mod, "Triangles", verts[6:13], [(0, 1, 2), (2, 3, 0), (4, 5, 6)])
    tri_only.data.polygons[2].material_index = 1
    v, t, m = mesh_arrays(tri_only.data)
    ref_t, ref_m = loop_triangles(tri_only.data)
    assert np.array_equal(t, ref_t) and np.array_equal(m, ref_m) and list(m) == [0, 0, 1]


def test_modifiers_instances_hidden_objects_and_labels(bpy_mod, empty_scene):
    # a floor 2 m below the sensor; an Array of 3 posts; a collection instanced twice;
    # one object hidden from render
    add_mesh(bpy_mod, "Floor", [(-50, -2, -50), (50, -2, -50), (50, -2, 50), (-50, -2, 50)], [(0, 1, 2, 3)])
    post = add_mesh(bpy_mod, "Post", [(-0.2, -2, -5.2), (0.2, -2, -5.2), (0.2, 2, -5.2), (-0.2, 2, -5.2)],
                    [(0, 1, 2, 3)])
    arr = post.modifiers.new("Array", "ARRAY")
    arr.count = 3
    arr.use_relative_offset = False
    arr.use_constant_offset = True
    arr.constant_offset_displace = (1.0, 0.0, 0.0)
    post["blensor_label"] = "pole"
    proto = bpy_mod.data.collections.new("Proto")
    empty_scene.collection.children.link(proto)
    box = add_mesh(bpy_mod, "Box", [(-0.5, -1, -0.5), (0.5, -1, -0.5), (0.5, 1, -0.5), (-0.5, 1, -0.5)],
                   [(0, 1, 2, 3)])
    empty_scene.collection.objects.unlink(box)
    proto.objects.link(box)
    bpy_mod.context.view_layer.layer_collection.children["Proto"].exclude = True
    for i, x in enumerate((-4.0, 4.0)):
        e = bpy_mod.data.objects.new(f"Inst{i}", None)
        e.instance_type = "COLLECTION"
        e.instance_collection = proto
        e.location = (x, 0.0, 6.0)  # the box faces the sensor at z = 5.5 (behind it: +Z)
        e["blensor_label"] = "other-object"
        empty_scene.collection.objects.link(e)
    ghost = add_mesh(bpy_mod, "Ghost", [(-9, -2, -9), (9, -2, -9), (9, 9, -9), (-9, 9, -9)], [(0, 1, 2, 3)])
    ghost.hide_render = True
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0, -30", angle_resolution=0.25)
    r = blensor_addon.scan(cam, axes="blensor")
    names = {o["id"]: o for o in r.objects}
    hit_names = {names[i]["name"] for i in np.unique(r.object_id)}
    assert hit_names == {"Floor", "Post", "Box"}
    # all three posts of the Array (x = 0, 1, 2 at z = -5.2) were hit by the level laser
    level = r.channel == 0
    post_id = [o["id"] for o in r.objects if o["name"] == "Post"][0]
    px = r.xyz[level & (r.object_id == post_id), 0]
    assert {int(np.round(x)) for x in px} == {0, 1, 2}
    assert names[post_id]["label"] == "pole"
    # the two instances of the same box: one source object, two instancers (labelled
    # "other-object"), instance index 1 in each; drawn-directly objects have 0 for both
    by_name = {o["name"]: o for o in r.objects}
    box = r.object_id == by_name["Box"]["id"]
    assert set(r.instancer_id[box].tolist()) == {by_name["Inst0"]["id"], by_name["Inst1"]["id"]}
    assert set(r.instance_id[box].tolist()) == {1}
    assert by_name["Inst0"]["label"] == by_name["Inst1"]["label"] == "other-object"
    assert not r.instancer_id[~box].any() and not r.instance_id[~box].any()
    # the user's objects were not changed by the scan
    assert post.modifiers[0].count == 3 and len(post.data.vertices) == 4


def test_object_ids_stable_across_frames(bpy_mod, crossing):
    ext = SceneExtractor()
    cam = bpy_mod.data.objects["Velodyne"]
    first, snaps = {}, []
    for f in (1, 20, 40):
        crossing.frame_set(f)
        snap = ext.extract(bpy_mod.context.evaluated_depsgraph_get(), cam)
        for o in snap.objects:
            first.setdefault(o["id"], o["name"])
            assert first[o["id"]] == o["name"]
        keys = list(zip(snap.instance_object_id.tolist(), snap.instance_instancer_id.tolist(),
                        snap.instance_index.tolist()))
        assert len(set(keys)) == len(keys)  # one key per instance, never shared
        # ids come from the file, not from the frames seen before: a fresh extractor that
        # sees only this frame numbers every instance the same way
        fresh = SceneExtractor().extract(bpy_mod.context.evaluated_depsgraph_get(), cam)
        assert np.array_equal(fresh.instance_object_id, snap.instance_object_id)
        assert np.array_equal(fresh.instance_instancer_id, snap.instance_instancer_id)
        assert fresh.objects == snap.objects
        snaps.append(snap)
    crossing.frame_set(1)
    # the cars moved: same mesh fingerprints (no BVH rebuild), other transforms, other pose
    a, b = snaps[0], snaps[1]
    assert [m.key for m in a.geometry.meshes] == [m.key for m in b.geometry.meshes]
    assert not np.array_equal(a.geometry.instance_matrix, b.geometry.instance_matrix)
    assert a.sensor_to_world[1, 3] < b.sensor_to_world[1, 3]  # the ego car drives north (+Y)
    assert math.isclose(np.linalg.det(a.sensor_to_world[:3, :3]), 1.0, abs_tol=1e-9)


def _scatter_scene(bpy_mod, n):
    import importlib.util
    spec = importlib.util.spec_from_file_location("gn_scatter", ROOT / "scenes" / "gn_scatter.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    red = bpy_mod.data.materials.new("Red")
    red.blensor.reflectivity = 0.5
    red.diffuse_color = (1.0, 0.0, 0.0, 1.0)
    return mod.make_gn_scatter(bpy_mod, n=n, size=20.0, box_half=0.2, z=-1.5, material=red)


def test_geometry_nodes_instances_as_arrays_equal_the_per_instance_loop(bpy_mod, empty_scene):
    scatter = _scatter_scene(bpy_mod, 21)  # 441 boxes 1 m apart, 1.5 m below the sensor
    cam = add_camera(bpy_mod, rotation=(math.pi / 2, 0.0, 0.0))  # +Y up = world +Z
    generic_sensor(cam, "-20, -30, -45", angle_resolution=0.5)
    depsgraph = bpy_mod.context.evaluated_depsgraph_get()
    fast = SceneExtractor().extract(depsgraph, cam)
    slow_ext = SceneExtractor()
    slow_ext.vectorize = False
    slow = slow_ext.extract(depsgraph, cam)
    assert fast.geometry.instance_mesh.shape == slow.geometry.instance_mesh.shape == (441,)
    np.testing.assert_allclose(fast.geometry.instance_matrix, slow.geometry.instance_matrix, atol=1e-6)
    for a, b in ((fast.instance_object_id, slow.instance_object_id),
                 (fast.instance_instancer_id, slow.instance_instancer_id), (fast.instance_index, slow.instance_index)):
        assert np.array_equal(a, b)
    assert sorted(fast.instance_index.tolist()) == list(range(1, 442))
    r_fast = blensor_addon.scan(cam, axes="blensor")
    SceneExtractor.vectorize = False
    try:
        r_slow = blensor_addon.scan(cam, axes="blensor")
    finally:
        SceneExtractor.vectorize = True
    assert len(r_fast) > 1000
    for name, a in r_fast.arrays().items():
        assert np.array_equal(a, getattr(r_slow, name)), name
    names = {o["id"]: o["name"] for o in r_fast.objects}
    assert {names[i] for i in np.unique(r_fast.object_id)} == {"Scatter"}
    from blensor_addon.scene.shading import linear_to_srgb_u8, material_color
    red = linear_to_srgb_u8(material_color(bpy_mod.data.materials["Red"]))
    assert np.all(r_fast.reflectivity == np.float32(0.5)) and np.all(r_fast.color == red)
    # the box tops (z = -1.3 m) seen by the -45 deg laser: range 1.3 / sin(45 deg)
    steep = r_fast.channel == 2
    np.testing.assert_allclose(r_fast.range[steep & (r_fast.normal[:, 1] > 0.99)], 1.3 * math.sqrt(2),
                               atol=1e-4)
    scatter.hide_render = True
    assert len(blensor_addon.scan(cam)) == 0


def test_static_meshes_read_once_per_scan_and_again_after_an_edit(bpy_mod, empty_scene, monkeypatch):
    # a mesh object without modifiers, shape keys or mesh animation cannot change between
    # time samples: one extractor reads it once; a mesh with a modifier is read at every
    # sample; an edit (depsgraph update) makes the static one be read again
    from blensor_addon.scene import extract
    reads = []
    real = extract.mesh_arrays
    monkeypatch.setattr(extract, "mesh_arrays", lambda me: reads.append(me.name) or real(me))
    cam = add_camera(bpy_mod, location=(0.0, 0.0, 1.0))
    wall = add_mesh(bpy_mod, "Wall", [(-5, 8, -5), (5, 8, -5), (5, 8, 5), (-5, 8, 5)], [(0, 1, 2, 3)])
    bent = add_mesh(bpy_mod, "Bent", [(-5, 12, -5), (5, 12, -5), (5, 12, 5), (-5, 12, 5)], [(0, 1, 2, 3)])
    bent.modifiers.new("Subsurf", "SUBSURF").levels = 1
    keyed = add_mesh(bpy_mod, "Keyed", [(-5, 16, -5), (5, 16, -5), (5, 16, 5), (-5, 16, 5)], [(0, 1, 2, 3)])
    keyed.shape_key_add(name="Basis")
    scene = bpy_mod.context.scene
    # an animated empty: every frame change reports an update, so each sample is extracted
    # (an unchanged scene would give its one snapshot again: tests/test_scene_cache.py)
    mover = bpy_mod.data.objects.new("Mover", None)
    scene.collection.objects.link(mover)
    for f in (1, 3):
        mover.location.x = f
        mover.keyframe_insert("location", frame=f)
    ext = SceneExtractor()
    depsgraph = bpy_mod.context.evaluated_depsgraph_get()
    snaps = []
    for f in (1, 2, 3):
        scene.frame_set(f)
        snaps.append(ext.extract(depsgraph, cam))
    assert reads.count("Wall") == 1 and reads.count("Keyed") == 3 and len(reads) == 7  # Bent: its evaluated mesh, 3x
    assert len({snap.geometry.meshes[0].key for snap in snaps}) == 1
    # an edit: the depsgraph update handler notes it and the next sample reads the wall again
    wall.data.vertices[0].co.y = 9.0
    wall.data.update()
    bpy_mod.context.view_layer.update()
    scene.frame_set(4)
    snap = ext.extract(depsgraph, cam)
    assert reads.count("Wall") == 2
    tops = sorted(float(m.vertices[:, 1].max()) for m in snap.geometry.meshes)
    assert tops[0] == 9.0 and 8.0 not in tops  # the edited wall, not the cached one
    assert len(ext.static_meshes) == 1  # one entry per mesh, replaced when it changed
    # the cache needs the handlers: without them nothing would notice an edit, so no mesh is cached
    monkeypatch.setattr(extract, "note_geometry_edits", lambda *_a: None)
    assert extract.static_mesh_key(wall, scene) is None


def _wall_depth(snap, name):
    """Largest y of the named object's mesh in a snapshot (object space)."""
    ids = {o["name"]: o["id"] for o in snap.objects}
    i = snap.instance_object_id.tolist().index(ids[name])
    return float(snap.geometry.meshes[snap.geometry.instance_mesh[i]].vertices[:, 1].max())


def test_static_mesh_cache_sees_parent_deforms_and_frame_change_scripts(bpy_mod, empty_scene):
    # meshes changed by what is not a modifier of their own: an armature parent (Blender's
    # own deform modifier), a frame-change script moving vertices, one swapping the mesh
    scene = bpy_mod.context.scene
    cam = add_camera(bpy_mod, location=(0.0, 0.0, 1.0))
    quad = [(0, 1, 2, 3)]
    moved = add_mesh(bpy_mod, "Moved", [(-5, 8, -5), (5, 8, -5), (5, 8, 5), (-5, 8, 5)], quad)
    swapped = add_mesh(bpy_mod, "Swapped", [(-5, 12, -5), (5, 12, -5), (5, 12, 5), (-5, 12, 5)], quad)
    # an armature parent whose bone moves +y between frames 1 and 3
    arm = bpy_mod.data.objects.new("Rig", bpy_mod.data.armatures.new("Rig"))
    scene.collection.objects.link(arm)
    bpy_mod.context.view_layer.objects.active = arm
    bpy_mod.ops.object.mode_set(mode="EDIT")
    bone = arm.data.edit_bones.new("B")
    bone.head, bone.tail = (0.0, 20.0, -5.0), (0.0, 20.0, 5.0)
    bpy_mod.ops.object.mode_set(mode="OBJECT")
    rigged = add_mesh(bpy_mod, "Rigged", [(-5, 20, -5), (5, 20, -5), (5, 20, 5), (-5, 20, 5)], quad)
    group = rigged.vertex_groups.new(name="B")
    group.add(range(4), 1.0, "REPLACE")
    rigged.parent, rigged.parent_type = arm, "ARMATURE"
    pb = arm.pose.bones["B"]
    for f, y in ((1, 0.0), (3, 2.0)):
        pb.location = (0.0, 0.0, y)  # along the bone's local z: the vertices move
        pb.keyframe_insert("location", frame=f)

    def script(sc, *_args):
        f = sc.frame_current
        for v in moved.data.vertices:
            v.co.y = 8.0 + f
        moved.data.update()
        me = bpy_mod.data.meshes.new("Swap")
        me.from_pydata([(-5, 12 + f, -5), (5, 12 + f, -5), (5, 12 + f, 5), (-5, 12 + f, 5)], [], quad)
        old, swapped.data = swapped.data, me
        bpy_mod.data.meshes.remove(old)

    bpy_mod.app.handlers.frame_change_pre.append(script)
    try:
        ext = SceneExtractor()
        depsgraph = bpy_mod.context.evaluated_depsgraph_get()
        seen = {}
        for f in (1, 2, 3):
            scene.frame_set(f)
            snap = ext.extract(depsgraph, cam)
            seen[f] = {n: _wall_depth(snap, n) for n in ("Moved", "Swapped")}
            seen[f]["Rigged"] = snap.geometry.meshes[snap.geometry.instance_mesh[
                snap.instance_object_id.tolist().index({o["name"]: o["id"] for o in snap.objects}["Rigged"])]].vertices.copy()
    finally:
        bpy_mod.app.handlers.frame_change_pre.remove(script)
    assert [seen[f]["Moved"] for f in (1, 2, 3)] == [9.0, 10.0, 11.0]
    assert [seen[f]["Swapped"] for f in (1, 2, 3)] == [13.0, 14.0, 15.0]
    assert not np.allclose(seen[1]["Rigged"], seen[3]["Rigged"], atol=1e-3)  # the bone moved the mesh
    from blensor_addon.scene.extract import static_mesh_key
    assert static_mesh_key(rigged, scene) is None and static_mesh_key(moved, scene) is not None
