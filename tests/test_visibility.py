"""Scan what renders (reference section 3.2): render visibility, render modifier levels,
modifiers disabled in the viewport only; ``visibility="viewport"`` scans the viewport's
evaluation; the file is unchanged afterwards."""
from __future__ import annotations

import numpy as np
import pytest

import blensor_addon
from conftest import add_camera, add_mesh, generic_sensor


def cube(bpy, name, center, half=1.0):
    cx, cy, cz = center
    v = [(cx + sx * half, cy + sy * half, cz + sz * half) for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]
    f = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    return add_mesh(bpy, name, v, f)


def state(bpy):
    out = {}
    for ob in bpy.data.objects:
        out[ob.name] = (ob.hide_viewport, ob.hide_render, ob.hide_get(),
                        [(m.name, m.show_viewport, m.show_render, getattr(m, "levels", None)) for m in ob.modifiers])
    return out


@pytest.fixture
def scene(bpy_mod, empty_scene):
    # the sensor at the origin looks down -Z; a level laser (elevation 0) at azimuth 0
    # meets the centre of each cube's +Z face (the head turns clockwise, issue 21: a
    # sector's one column is at its end angle)
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=1.0, start_angle=-1.0, end_angle=0.0)  # cw: one column at 0 deg
    hidden = cube(bpy_mod, "ViewportHidden", (0, 0, -5))       # face at z = -4
    hidden.hide_viewport = True
    hidden.hide_set(True)
    smooth = cube(bpy_mod, "Smooth", (0, 0, -5))                # hidden behind: only in viewport mode
    smooth.hide_render = True
    return cam


def test_render_visibility_scans_the_viewport_hidden_object(bpy_mod, scene):
    before = state(bpy_mod)
    r = blensor_addon.scan(scene)
    names = {o["id"]: o["name"] for o in r.objects}
    assert [names[i] for i in r.object_id] == ["ViewportHidden"]
    np.testing.assert_allclose(r.range, [4.0], atol=1e-5)
    scene.data.blensor.visibility = "viewport"
    r = blensor_addon.scan(scene)
    assert [names[i] for i in r.object_id] == ["Smooth"]
    assert state(bpy_mod) == before  # every switch undone


def test_viewport_mode_leaves_out_a_collection_hidden_by_its_eye(bpy_mod, empty_scene):
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=1.0, start_angle=-1.0, end_angle=0.0)  # cw: one column at 0 deg
    coll = bpy_mod.data.collections.new("Eyed")
    bpy_mod.context.scene.collection.children.link(coll)
    ob = cube(bpy_mod, "InEyed", (0, 0, -5))
    bpy_mod.context.scene.collection.objects.unlink(ob)
    coll.objects.link(ob)
    lc = bpy_mod.context.view_layer.layer_collection.children["Eyed"]
    lc.hide_viewport = True  # the eye in the outliner: the viewport does not show it
    before = state(bpy_mod)
    assert len(blensor_addon.scan(cam)) == 1  # it renders
    cam.data.blensor.visibility = "viewport"
    assert len(blensor_addon.scan(cam)) == 0
    assert state(bpy_mod) == before and lc.hide_viewport


def test_motion_boxes_are_what_renders_and_leave_the_file_unchanged(bpy_mod, scene, tmp_path):
    import json

    from blensor_addon.jobs.motion_export import export_motion
    for name in ("ViewportHidden", "Smooth"):
        bpy_mod.data.objects[name]["blensor_label"] = "car"
    before = state(bpy_mod)
    export_motion([1], tmp_path, ("json",))
    boxes = json.loads((tmp_path / "boxes" / "00001.json").read_text())["boxes"]
    assert [b["object"] for b in boxes] == ["ViewportHidden"]  # Smooth is hidden from render
    np.testing.assert_allclose(boxes[0]["center"], [0, 0, -5], atol=1e-9)
    np.testing.assert_allclose(boxes[0]["size"], [2, 2, 2], atol=1e-9)
    assert state(bpy_mod) == before


def test_subdivision_at_render_levels_and_viewport_only_disabled_modifier(bpy_mod, empty_scene):
    cam = add_camera(bpy_mod)
    generic_sensor(cam, "0", angle_resolution=1.0, start_angle=-1.0, end_angle=0.0)  # cw: one column at 0 deg
    ob = cube(bpy_mod, "Rounded", (0, 0, -5))
    sub = ob.modifiers.new("Subsurf", "SUBSURF")
    sub.levels, sub.render_levels = 0, 3
    # an Array copy 3 m nearer (face at z = -16), disabled in the viewport only: it
    # renders, so it is scanned
    far = cube(bpy_mod, "Far", (0, 0, -20))
    arr = far.modifiers.new("Array", "ARRAY")
    arr.use_relative_offset, arr.use_constant_offset = False, True
    arr.constant_offset_displace = (0.0, 0.0, 3.0)
    arr.show_viewport = False
    before = state(bpy_mod)
    r = blensor_addon.scan(cam)
    names = {o["id"]: o["name"] for o in r.objects}
    # Catmull-Clark pulls the face centre of a cube of half size 1 in to 5/6 of it... at
    # level 3 the centre sits at ~0.79 m from the cube centre: range ~4.21 m, not 4.0
    assert [names[i] for i in r.object_id] == ["Rounded"]
    assert 4.15 < r.range[0] < 4.3
    ob.hide_render = True  # now the Array copy of Far is the first hit
    r = blensor_addon.scan(cam)
    np.testing.assert_allclose(r.range, [16.0], atol=1e-5)
    cam.data.blensor.visibility = "viewport"
    ob.hide_render = False
    r = blensor_addon.scan(cam)
    np.testing.assert_allclose(r.range, [4.0], atol=1e-5)  # viewport: level 0, a flat face
    ob.hide_render = True
    r = blensor_addon.scan(cam)
    np.testing.assert_allclose(r.range, [4.0], atol=1e-5)  # viewport mode ignores hide_render
    ob.hide_render = False
    ob.hide_viewport = True  # viewport: no Array copy, Far's own face at z = -19
    r = blensor_addon.scan(cam)
    np.testing.assert_allclose(r.range, [19.0], atol=1e-5)
    ob.hide_viewport = False
    assert state(bpy_mod) == before
